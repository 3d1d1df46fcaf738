package alert

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Alert is one alert as a check finds it firing.
type Alert struct {
	// Key names the alert's instance: its name, and the group or source
	// it is about ("failure_group:3f9a...", "signature_failures:stripe").
	Key string
	// Name is the rule's name.
	Name    string
	Summary string
	// Level grows with the alert's size where a rule measures one (a
	// failure group's count, tenfold): a higher level is a new firing
	// message, a lower one is not.
	Level int
}

// Group is a failure group as the failure_group rule reads it.
type Group struct {
	ID      string
	Count   int
	Source  string
	Handler string
	Error   string
	// FirstFailedAt is when the group's longest failing event started
	// failing.
	FirstFailedAt time.Time
}

// Rules hold what the rules read and their thresholds.
type Rules struct {
	DB *sql.DB
	// Backlog reads the ledger's backlog (Store.Backlog).
	Backlog func(ctx context.Context) (ledger.Backlog, error)
	// GroupsFunc reads the failure groups.
	GroupsFunc func(ctx context.Context) ([]Group, error)
	// OrphansFunc is how many orphans this process's sweep has found
	// since it started.
	OrphansFunc func() float64
	// DriftFunc is how many objects this process's last scheduled drift
	// check found drifted (DRIFT_INTERVAL): 0 before one ran.
	DriftFunc func() float64
	// OldestPending is the backlog age above which backlog_oldest_pending
	// fires.
	OldestPending time.Duration
	// FailedAge is how long an event has been failed for before
	// failed_events fires.
	FailedAge time.Duration
	// SignatureFailures is the refused signatures of one source in
	// SignatureWindow at which signature_failures fires.
	SignatureFailures int

	// orphansSeen is OrphansFunc at the previous check, -1 before one.
	orphansSeen float64
}

// SignatureWindow is the window refused signatures and 503 answers are
// counted in.
const SignatureWindow = 5 * time.Minute

// Firing runs every rule and returns the alerts that fire now.
func (r *Rules) Firing(ctx context.Context) ([]Alert, error) {
	var out []Alert
	if r.GroupsFunc != nil {
		groups, err := r.GroupsFunc(ctx)
		if err != nil {
			return nil, err
		}
		for _, g := range groups {
			handler := g.Handler
			if handler == "" {
				handler = "no handler"
			}
			out = append(out, Alert{Key: "failure_group:" + g.ID, Name: "failure_group", Level: tenfold(g.Count),
				Summary: fmt.Sprintf("%d failed event(s) from %s in %s: %s (group %s)", g.Count, g.Source, handler, g.Error, g.ID)})
		}
		if a, ok := r.failedTooLong(groups, time.Now()); ok {
			out = append(out, a)
		}
	}
	if r.Backlog != nil {
		b, err := r.Backlog(ctx)
		if err != nil {
			return nil, err
		}
		if b.Oldest > r.OldestPending {
			out = append(out, Alert{Key: "backlog_oldest_pending", Name: "backlog_oldest_pending",
				Summary: fmt.Sprintf("the oldest pending event is %s old (over %s): %d claimed, %d failed", b.Oldest.Round(time.Second), r.OldestPending, b.Claimed, b.Failed)})
		}
	}
	if r.DB != nil {
		sig, err := r.deliveries(ctx, "invalid_signature", r.SignatureFailures, "signature_failures",
			"source %s refused %d signature(s) in the last %s: a rotated secret, or deliveries not from the provider")
		if err != nil {
			return nil, err
		}
		unavailable, err := r.deliveries(ctx, "unavailable", 1, "deliveries_unavailable",
			"source %s answered %d deliveries 503 in the last %s: the database is slow or unreachable, or the body budget is spent (the provider retries them)")
		if err != nil {
			return nil, err
		}
		out = append(append(out, sig...), unavailable...)
	}
	if r.DriftFunc != nil {
		if n := r.DriftFunc(); n > 0 {
			out = append(out, Alert{Key: "drift_found", Name: "drift_found",
				Summary: fmt.Sprintf("the last scheduled drift check found %.0f object(s) that differ from the provider's: hookledger drift stripe shows them", n)})
		}
	}
	if r.OrphansFunc != nil {
		n := r.OrphansFunc()
		if r.orphansSeen >= 0 && n > r.orphansSeen {
			out = append(out, Alert{Key: "ledger_orphans", Name: "ledger_orphans",
				Summary: fmt.Sprintf("the ledger's sweep found %.0f claimed event(s) whose River job was stopped or gone since the last check (River UI's Cancel or Delete, the rescuer, a lost job)", n-r.orphansSeen)})
		}
		r.orphansSeen = n
	}
	return out, nil
}

// failedTooLong is the alert failed_events when one of groups has had an
// event failed for longer than r.FailedAge at now: failures nobody has
// requeued or discarded, which a failure_group message announced when
// they began.
func (r *Rules) failedTooLong(groups []Group, now time.Time) (Alert, bool) {
	var (
		oldest         time.Time
		stale, failing int
	)
	for _, g := range groups {
		if g.FirstFailedAt.IsZero() || now.Sub(g.FirstFailedAt) <= r.FailedAge {
			continue
		}
		stale, failing = stale+1, failing+g.Count
		if oldest.IsZero() || g.FirstFailedAt.Before(oldest) {
			oldest = g.FirstFailedAt
		}
	}
	if stale == 0 {
		return Alert{}, false
	}
	return Alert{Key: "failed_events", Name: "failed_events",
		Summary: fmt.Sprintf("events have been failed for over %s, the oldest for %s: %d group(s) of %d failed event(s) wait for a fix, a requeue or a discard (hookledger failures)",
			r.FailedAge, now.Sub(oldest).Round(time.Second), stale, failing)}, true
}

// deliveriesSQL counts each source's deliveries of one outcome in the
// window, from every receiver's delivery counts.
const deliveriesSQL = `
	SELECT source, sum(count) FROM delivery_stat
	WHERE outcome = $1 AND minute >= $2
	GROUP BY source HAVING sum(count) >= $3
	ORDER BY source`

// deliveries fires alert name for each source with at least threshold
// deliveries answered with outcome in the last SignatureWindow; summary
// takes the source, the count and the window.
func (r *Rules) deliveries(ctx context.Context, outcome string, threshold int, name, summary string) ([]Alert, error) {
	rows, err := r.DB.QueryContext(ctx, deliveriesSQL, outcome, time.Now().Add(-SignatureWindow).Truncate(time.Minute), threshold)
	if err != nil {
		return nil, fmt.Errorf("count %s deliveries: %w", outcome, err)
	}
	defer rows.Close()
	var out []Alert
	for rows.Next() {
		var (
			source string
			n      int64
		)
		if err := rows.Scan(&source, &n); err != nil {
			return nil, fmt.Errorf("count %s deliveries: %w", outcome, err)
		}
		out = append(out, Alert{Key: name + ":" + source, Name: name, Summary: fmt.Sprintf(summary, source, n, SignatureWindow)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count %s deliveries: %w", outcome, err)
	}
	return out, nil
}

// tenfold is the level of a count: 0 below 100, 1 below 1,000, 2 below
// 10,000 ...: a group fires when it appears, and again each time it
// reaches ten times as many events, from 100 on; a burst of a few dozen
// failures of one cause is one message, however the checks fall in it.
func tenfold(n int) int {
	level := 0
	for ; n >= 100; n /= 10 {
		level++
	}
	return level
}
