package failure

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Ledger is what the groups are read and acted on through: the methods of
// *ledger.Store it uses.
type Ledger interface {
	FindJobs(ctx context.Context, keys []ledger.EventKey) (map[ledger.EventKey]*ledger.Job, error)
	Requeue(ctx context.Context, namespace, eventID string, force bool) (ledger.RequeueResult, error)
	Discard(ctx context.Context, namespace, eventID, reason string) (*ent.WebhookEvent, error)
}

// Groups reads and acts on the failure groups of one ledger.
type Groups struct {
	db     *sql.DB
	ledger Ledger
}

// New returns the failure groups of the ledger in db, acted on through l.
func New(db *sql.DB, l Ledger) *Groups { return &Groups{db: db, ledger: l} }

// Group is the failed events of one cause.
type Group struct {
	// ID is a hash of Source, Handler and Error: stable for as long as the
	// cause is the same.
	ID    string `json:"id"`
	Count int    `json:"count"`
	// Source is the configured source the events came through.
	Source string `json:"source"`
	// Handler is the module.handler that failed; "" when the failure was
	// not a handler's (River stopped the job, the payload cannot be read).
	Handler string `json:"handler"`
	// Error is the error with its variable parts normalised.
	Error string `json:"error"`
	// SampleError is the sample event's own error, first line.
	SampleError   string    `json:"sample_error"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	// SampleEventID is the group's most recently failed event, in
	// SampleNamespace.
	SampleEventID   string `json:"sample_event_id"`
	SampleNamespace string `json:"sample_namespace"`
	// NextRetryAt is the soonest automatic retry River has scheduled among
	// the group's SampledRetries most recent failures; null when none
	// waits (failed for good, or River gave up: requeue them).
	NextRetryAt *time.Time `json:"next_retry_at"`

	recent []member
}

// member is one failed event of a group.
type member struct {
	key      ledger.EventKey
	failedAt time.Time
}

// MaxScan bounds the failed rows one reading groups, the oldest first; a
// ledger with more reports Truncated.
const MaxScan = 100_000

// SampledRetries is how many of a group's most recent failures its next
// retry is read from: retries back off, so the soonest is among the
// newest failures, and a group of thousands costs one small lookup.
const SampledRetries = 20

// scanPage is the rows one statement of a scan reads.
const scanPage = 2000

// failedSQL reads failed rows after the cursor ($1, $2) in received_at
// order, through the partial index on claimed and failed rows (status is
// a literal so that a generic plan can use it; PostgreSQL starts the
// index range at the cursor's received_at): each row's key, source,
// last error, the handler and time of its newest failure, and when it
// started failing.
const failedSQL = `
	SELECT id, namespace, event_id, source, coalesce(last_error, ''),
		coalesce(failure_log->-1->>'handler', ''), (failure_log->-1->>'at')::timestamptz,
		failing_since, received_at
	FROM webhook_event
	WHERE status = 'failed' AND (received_at, id) > ($1, $2)
	ORDER BY received_at, id
	LIMIT $3`

// Report is the failure groups of the ledger.
type Report struct {
	Groups []Group `json:"groups"`
	// Failed is how many failed rows were read.
	Failed int `json:"failed"`
	// Truncated: the ledger holds more than MaxScan failed rows, and the
	// groups are those of the oldest MaxScan.
	Truncated bool `json:"truncated"`
}

// List returns the failure groups, the largest first, each with its
// next retry.
func (g *Groups) List(ctx context.Context) (Report, error) {
	groups := map[string]*Group{}
	var r Report
	causes := causes{}
	err := g.scan(ctx, func(m member, source, handler, text string, first time.Time) {
		r.Failed++
		c := causes.of(source, handler, text)
		gr := groups[c.id]
		if gr == nil {
			gr = &Group{ID: c.id, Source: source, Handler: c.handler, Error: c.norm}
			groups[c.id] = gr
		}
		gr.add(m, c.text, first)
		gr.recent = append(gr.recent, m)
		if len(gr.recent) > 4*SampledRetries {
			gr.recent = newest(gr.recent, SampledRetries)
		}
	})
	if errors.Is(err, errTruncated) {
		r.Truncated, err = true, nil
	}
	if err != nil {
		return r, err
	}
	r.Groups = make([]Group, 0, len(groups))
	for _, gr := range groups {
		gr.recent = newest(gr.recent, SampledRetries)
		r.Groups = append(r.Groups, *gr)
	}
	slices.SortFunc(r.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastFailedAt.Compare(a.LastFailedAt), cmp.Compare(a.ID, b.ID))
	})
	if err := g.nextRetries(ctx, r.Groups); err != nil {
		return r, err
	}
	return r, nil
}

// Find returns the group id and the keys of its events, oldest first;
// ErrUnknownGroup when no failed event is in it.
func (g *Groups) Find(ctx context.Context, id string) (Group, []ledger.EventKey, error) {
	var (
		gr   Group
		keys []ledger.EventKey
	)
	causes := causes{}
	err := g.scan(ctx, func(m member, source, handler, text string, first time.Time) {
		c := causes.of(source, handler, text)
		if c.id != id {
			return
		}
		if gr.Count == 0 {
			gr = Group{ID: id, Source: source, Handler: c.handler, Error: c.norm}
		}
		gr.add(m, c.text, first)
		keys = append(keys, m.key)
	})
	if err != nil && !errors.Is(err, errTruncated) {
		return gr, nil, err
	}
	if gr.Count == 0 {
		return gr, nil, ErrUnknownGroup
	}
	return gr, keys, nil
}

// cause is a failed row's error as a group reads it: the handler and the
// text Split gives, the text normalised, and the group's id.
type cause struct{ handler, text, norm, id string }

// causes are the causes of the error texts one scan has read so far, so
// that the failures of one cause with the same text, as a poison event's
// or a timeout's are, are split and normalised once. It keeps at most
// maxCauses texts of at most maxCauseText bytes: a few megabytes.
type causes map[string]cause

const (
	maxCauses    = 4096
	maxCauseText = 1024
)

// of is the cause of a row of source whose failure log names handler and
// whose last error is lastError.
func (cs causes) of(source, handler, lastError string) cause {
	// Split reads the first line only, as the key does.
	line, _, _ := strings.Cut(strings.TrimSpace(lastError), "\n")
	k := source + "\x00" + handler + "\x00" + line
	if c, ok := cs[k]; ok {
		return c
	}
	var c cause
	c.handler, c.text = Split(lastError, handler)
	c.norm = Normalise(c.text)
	c.id = groupID(source, c.handler, c.norm)
	if len(cs) < maxCauses && len(line) <= maxCauseText {
		cs[k] = c
	}
	return c
}

// ErrUnknownGroup is returned for a group id no failed event has: its
// events were requeued, discarded or settled, or the id is wrong.
var ErrUnknownGroup = errors.New("no failed event is in this group (requeued, discarded or settled since, or a wrong id)")

// errTruncated ends a scan at MaxScan rows.
var errTruncated = errors.New("more failed rows than a scan reads")

// scan calls fn for each failed row, oldest first, a page at a time, and
// ends with errTruncated after MaxScan rows.
func (g *Groups) scan(ctx context.Context, fn func(m member, source, handler, text string, first time.Time)) error {
	var (
		after   time.Time
		afterID int64
		n       int
	)
	for {
		rows, err := g.db.QueryContext(ctx, failedSQL, after, afterID, scanPage)
		if err != nil {
			return fmt.Errorf("read failed events: %w", err)
		}
		read := 0
		for rows.Next() {
			var (
				m                     member
				source, text, handler string
				lastAt, since         sql.NullTime
			)
			if err := rows.Scan(&afterID, &m.key.Namespace, &m.key.EventID, &source, &text, &handler, &lastAt, &since, &after); err != nil {
				rows.Close()
				return fmt.Errorf("read failed events: %w", err)
			}
			read++
			m.failedAt = after
			if lastAt.Valid {
				m.failedAt = lastAt.Time
			}
			first := m.failedAt
			if since.Valid {
				first = since.Time
			}
			fn(m, source, handler, text, first.UTC())
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("read failed events: %w", err)
		}
		n += read
		switch {
		case read < scanPage:
			return nil
		case n >= MaxScan:
			return errTruncated
		}
	}
}

// nextRetries sets each group's NextRetryAt from the apply jobs of its
// most recent failures, all read in one lookup.
func (g *Groups) nextRetries(ctx context.Context, groups []Group) error {
	var keys []ledger.EventKey
	for _, gr := range groups {
		for _, m := range gr.recent {
			keys = append(keys, m.key)
		}
	}
	jobs, err := g.ledger.FindJobs(ctx, keys)
	if err != nil {
		return err
	}
	for i := range groups {
		for _, m := range groups[i].recent {
			j := jobs[m.key]
			if j == nil || j.ScheduledAt == nil {
				continue
			}
			if at := j.ScheduledAt.UTC(); groups[i].NextRetryAt == nil || at.Before(*groups[i].NextRetryAt) {
				groups[i].NextRetryAt = &at
			}
		}
		groups[i].recent = nil
	}
	return nil
}

// newest keeps the n most recently failed of ms.
func newest(ms []member, n int) []member {
	slices.SortFunc(ms, func(a, b member) int { return b.failedAt.Compare(a.failedAt) })
	return slices.Clip(ms[:min(n, len(ms))])
}

// add counts m, whose error reads text and which started failing at
// first, in the group: the most recent failure is the sample.
func (gr *Group) add(m member, text string, first time.Time) {
	if gr.Count == 0 || first.Before(gr.FirstFailedAt) {
		gr.FirstFailedAt = first
	}
	gr.Count++
	if !m.failedAt.Before(gr.LastFailedAt) {
		gr.LastFailedAt = m.failedAt
		gr.SampleEventID, gr.SampleNamespace, gr.SampleError = m.key.EventID, m.key.Namespace, text
	}
}
