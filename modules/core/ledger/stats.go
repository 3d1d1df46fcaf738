package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExactSettledBelow is the table size under which CountByStatus counts
// settled rows exactly; above it, it estimates them from PostgreSQL's
// table statistics instead of scanning the ledger.
const ExactSettledBelow = 200_000

// CountByStatus counts ledger rows by status without scanning the whole
// ledger: claimed and failed through the partial index that holds only
// them, settled exactly while the table is small and, above
// ExactSettledBelow rows, as the table's live-row estimate (pg_stat's
// n_live_tup, else pg_class.reltuples) minus the unsettled rows, which is
// as fresh as autovacuum's last analyze. processing exists only inside an
// apply transaction, so no other session sees it: it is always 0 here.
// estimated reports whether settled is an estimate.
func CountByStatus(ctx context.Context, db *sql.DB) (counts map[string]int64, estimated bool, err error) {
	claimed, failed, _, err := pending(ctx, db)
	if err != nil {
		return nil, false, err
	}
	var live float64
	err = db.QueryRowContext(ctx, `
		SELECT COALESCE(NULLIF(s.n_live_tup, 0)::float8, greatest(c.reltuples, 0)::float8)
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = 'webhook_event'::regclass`).Scan(&live)
	if err != nil {
		return nil, false, fmt.Errorf("ledger size estimate: %w", err)
	}
	var settled int64
	if live < ExactSettledBelow {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`).Scan(&settled); err != nil {
			return nil, false, fmt.Errorf("count settled: %w", err)
		}
	} else {
		settled, estimated = max(int64(live)-claimed-failed, 0), true
	}
	return map[string]int64{"claimed": claimed, "processing": 0, "settled": settled, "failed": failed}, estimated, nil
}

// pending counts unsettled rows through the partial index on claimed and
// failed rows, and the age of the oldest.
func pending(ctx context.Context, db *sql.DB) (claimed, failed int64, oldest time.Duration, err error) {
	var age sql.NullFloat64
	err = db.QueryRowContext(ctx, `
		SELECT count(*) FILTER (WHERE status = 'claimed'), count(*) FILTER (WHERE status = 'failed'),
			EXTRACT(EPOCH FROM now() - min(received_at))
		FROM webhook_event WHERE status IN ('claimed', 'failed')`).Scan(&claimed, &failed, &age)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ledger backlog: %w", err)
	}
	return claimed, failed, time.Duration(max(age.Float64, 0) * float64(time.Second)), nil
}

// OldestPending is the age of the oldest unsettled row, 0 when none.
func OldestPending(ctx context.Context, db *sql.DB) (time.Duration, error) {
	_, _, age, err := pending(ctx, db)
	return age, err
}

// Collector exports the ledger backlog and River's queue depth at scrape
// time.
type Collector struct {
	DB *sql.DB

	backlog, oldest, queue *prometheus.Desc
}

// NewCollector returns a collector on db.
func NewCollector(db *sql.DB) *Collector {
	return &Collector{
		DB:      db,
		backlog: prometheus.NewDesc("hookledger_ledger_backlog", "Unsettled ledger rows by status.", []string{"status"}, nil),
		oldest:  prometheus.NewDesc("hookledger_ledger_oldest_pending_seconds", "Age of the oldest claimed or failed ledger row.", nil, nil),
		queue:   prometheus.NewDesc("hookledger_river_jobs", "River jobs not yet finalized, by kind and state.", []string{"kind", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
	ch <- c.queue
}

// Collect implements prometheus.Collector; a database error leaves the
// series out of this scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if claimed, failed, oldest, err := pending(ctx, c.DB); err == nil {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(claimed), "claimed")
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(failed), "failed")
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
	}
	rows, err := c.DB.QueryContext(ctx, `
		SELECT kind, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'running', 'pending')
		GROUP BY kind, state`)
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
