package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/ent/webhookevent"
)

// ExactSettledBelow is the table size under which CountByStatus counts
// settled rows exactly; above it, it estimates them from PostgreSQL's
// table statistics instead of scanning the ledger.
const ExactSettledBelow = 200_000

// CountByStatus counts ledger rows by status without scanning the whole
// ledger: claimed and failed through the partial index that holds only
// them, discarded through its own, settled exactly while the table is small and, above
// ExactSettledBelow rows, as the table's live-row estimate (pg_stat's
// n_live_tup, else pg_class.reltuples) minus the unsettled rows, which is
// as fresh as autovacuum's last analyze. processing is never counted (see
// the package doc): it is always 0 here. estimated reports whether settled
// is an estimate.
func (s *Store) CountByStatus(ctx context.Context) (counts map[string]int64, estimated bool, err error) {
	b, err := s.Backlog(ctx)
	if err != nil {
		return nil, false, err
	}
	var live float64
	err = s.db.QueryRowContext(ctx, `
		SELECT COALESCE(NULLIF(s.n_live_tup, 0)::float8, greatest(c.reltuples, 0)::float8)
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = 'webhook_event'::regclass`).Scan(&live)
	if err != nil {
		return nil, false, fmt.Errorf("ledger size estimate: %w", err)
	}
	var discarded int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_event WHERE status = `+discardedSQL).Scan(&discarded); err != nil {
		return nil, false, fmt.Errorf("count discarded: %w", err)
	}
	var settled int64
	if live < ExactSettledBelow {
		if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_event WHERE status = `+settledSQL).Scan(&settled); err != nil {
			return nil, false, fmt.Errorf("count settled: %w", err)
		}
	} else {
		settled, estimated = max(int64(live)-b.Claimed-b.Failed-discarded, 0), true
	}
	return map[string]int64{
		string(webhookevent.StatusClaimed):    b.Claimed,
		string(webhookevent.StatusProcessing): 0,
		string(webhookevent.StatusSettled):    settled,
		string(webhookevent.StatusFailed):     b.Failed,
		string(webhookevent.StatusDiscarded):  discarded,
	}, estimated, nil
}

// Backlog is the ledger's unsettled rows.
type Backlog struct {
	Claimed, Failed int64
	// Oldest is the age of the oldest of them, 0 when there is none.
	Oldest time.Duration
	// OldestFailed is how long the failed row that started failing first
	// has been failing, 0 when none is failed.
	OldestFailed time.Duration
}

// backlogQuery reads the backlog through the partial index on claimed and
// failed rows (webhookevent_pending): its predicate must follow from the
// WHERE clause, so the clause names exactly those two statuses, as
// literals. The oldest failure is one probe of the partial index of
// failed rows by failing_since (webhookevent_failing_since).
const backlogQuery = `
	SELECT count(*) FILTER (WHERE status = ` + claimedSQL + `), count(*) FILTER (WHERE status = ` + failedSQL + `),
		EXTRACT(EPOCH FROM now() - min(received_at)),
		EXTRACT(EPOCH FROM now() - (SELECT min(failing_since) FROM webhook_event WHERE status = ` + failedSQL + `))
	FROM webhook_event WHERE status IN (` + claimedSQL + `, ` + failedSQL + `)`

// Backlog counts the unsettled rows and the age of the oldest, through the
// partial index that holds only them.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	var (
		b           Backlog
		age, failed sql.NullFloat64
	)
	if err := s.db.QueryRowContext(ctx, backlogQuery).Scan(&b.Claimed, &b.Failed, &age, &failed); err != nil {
		return b, fmt.Errorf("ledger backlog: %w", err)
	}
	b.Oldest = time.Duration(max(age.Float64, 0) * float64(time.Second))
	b.OldestFailed = time.Duration(max(failed.Float64, 0) * float64(time.Second))
	return b, nil
}

// Collector exports the ledger backlog and River's queue depth at scrape
// time.
type Collector struct {
	store *Store

	backlog, oldest, oldestFailed, queue *prometheus.Desc
}

// NewCollector returns a collector of s.
func NewCollector(s *Store) *Collector {
	return &Collector{
		store:   s,
		backlog: prometheus.NewDesc("hookledger_ledger_backlog", "Unsettled ledger rows by status.", []string{"status"}, nil),
		oldest:  prometheus.NewDesc("hookledger_ledger_oldest_pending_seconds", "Age of the oldest claimed or failed ledger row.", nil, nil),
		oldestFailed: prometheus.NewDesc("hookledger_ledger_oldest_failed_seconds",
			"How long the failed ledger row that started failing first has been failing (0 when none is failed).", nil, nil),
		queue: prometheus.NewDesc("hookledger_river_jobs", "River jobs not yet finalized, by kind and state.", []string{"kind", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
	ch <- c.oldestFailed
	ch <- c.queue
}

// Collect implements prometheus.Collector; a database error leaves the
// series out of this scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if b, err := c.store.Backlog(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(b.Claimed), string(webhookevent.StatusClaimed))
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(b.Failed), string(webhookevent.StatusFailed))
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.Oldest.Seconds())
		ch <- prometheus.MustNewConstMetric(c.oldestFailed, prometheus.GaugeValue, b.OldestFailed.Seconds())
	}
	rows, err := c.store.db.QueryContext(ctx, unfinishedJobsSQL)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind, state string
			n           float64
		)
		if rows.Scan(&kind, &state, &n) == nil {
			ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, n, kind, state)
		}
	}
}
