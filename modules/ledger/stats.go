package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CountByStatus counts every ledger row by status.
func CountByStatus(ctx context.Context, db *sql.DB) (map[string]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT status, count(*) FROM webhook_event GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{"claimed": 0, "processing": 0, "settled": 0, "failed": 0}
	for rows.Next() {
		var (
			s string
			n int64
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// pending counts unsettled rows (through the partial index) and the age of
// the oldest.
func pending(ctx context.Context, db *sql.DB) (claimed, failed int64, oldest time.Duration, err error) {
	var age sql.NullFloat64
	err = db.QueryRowContext(ctx, `
		SELECT count(*) FILTER (WHERE status = 'claimed'), count(*) FILTER (WHERE status = 'failed'),
			EXTRACT(EPOCH FROM now() - min(received_at))
		FROM webhook_event WHERE status IN ('claimed', 'failed', 'processing')`).Scan(&claimed, &failed, &age)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ledger backlog: %w", err)
	}
	return claimed, failed, time.Duration(age.Float64 * float64(time.Second)), nil
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
