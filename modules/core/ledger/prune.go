package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"
)

// PruneBatch is how many rows one prune statement deletes: small enough
// that no statement holds its locks, or fills the WAL the claims' commits
// wait for, for long.
const PruneBatch = 200

// prunePauseFactor is the pause between two prune batches, in times the
// last batch took; maxPrunePause bounds it.
const (
	prunePauseFactor = 2
	maxPrunePause    = time.Second
)

// pacer spaces prune's batches: before the next, it waits twice as long as
// the last one took (at most maxPrunePause), so prune keeps a connection
// and a core busy at most a third of the time and the claims beside it
// keep their latency. A day of a million-event ledger takes minutes;
// nothing waits for it.
type pacer struct{ last time.Time }

func newPacer() *pacer { return &pacer{last: time.Now()} }

// next waits out the pause after the batch that just ended.
func (p *pacer) next(ctx context.Context) error {
	pause := min(prunePauseFactor*time.Since(p.last), maxPrunePause)
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	p.last = time.Now()
	return nil
}

// PruneReport says what Prune found or did.
type PruneReport struct {
	Rows   int64     `json:"rows"`
	Oldest time.Time `json:"oldest,omitempty"`
	Cutoff time.Time `json:"cutoff"`
	// KeptKeys are the dedup keys of the deleted rows that webhook_key
	// gained; ExpiredKeys those KEY_RETENTION removed from it.
	KeptKeys    int64 `json:"kept_keys"`
	ExpiredKeys int64 `json:"expired_keys"`
}

// Retention is how long the ledger keeps its rows, and how long the dedup
// keys of pruned rows are kept after (counted from their receipt; zero
// keeps them for ever).
type Retention struct {
	Rows, Keys time.Duration
}

// Prune deletes settled rows received before now-retention.Rows, keeping
// their dedup keys (keys.go), and then the delivery counts of that age and
// the kept keys past retention.Keys. It copies the keys first, waits for
// every statement that began before (a claim that missed them must have
// seen the rows), and then deletes, in batches of PruneBatch, each its own
// statement and each followed by a pause twice as long as it took, the rows
// whose keys are kept; rows a claim or apply holds are skipped and taken
// next time. With dryRun it only counts the ledger
// rows.
func (s *Store) Prune(ctx context.Context, retention Retention, dryRun bool) (PruneReport, error) {
	return prune(ctx, s.db, retention, dryRun)
}

// prune is Prune on db, for PruneWorker, which River builds before any
// Store.
func prune(ctx context.Context, db *sql.DB, retention Retention, dryRun bool) (PruneReport, error) {
	r := PruneReport{Cutoff: time.Now().Add(-retention.Rows)}
	if dryRun {
		var oldest sql.NullTime
		err := db.QueryRowContext(ctx, `SELECT count(*), min(received_at) FROM webhook_event WHERE status = `+settledSQL+` AND received_at < $1`,
			r.Cutoff).Scan(&r.Rows, &oldest)
		if err != nil {
			return r, fmt.Errorf("count prunable rows: %w", err)
		}
		r.Oldest = oldest.Time
		return r, nil
	}
	var err error
	if r.KeptKeys, err = keepKeys(ctx, db, r.Cutoff); err != nil {
		return r, err
	}
	if err := waitOlderSnapshots(ctx, db); err != nil {
		return r, err
	}
	pace := newPacer()
	for {
		res, err := db.ExecContext(ctx, `
			DELETE FROM webhook_event WHERE id IN (
				SELECT id FROM webhook_event e
				WHERE status = `+settledSQL+` AND received_at < $1 AND `+keptKeySQL("e")+`
				ORDER BY received_at
				LIMIT $2
				FOR UPDATE SKIP LOCKED)`, r.Cutoff, PruneBatch)
		if err != nil {
			return r, fmt.Errorf("prune: %w", err)
		}
		n, _ := res.RowsAffected()
		r.Rows += n
		if n < PruneBatch {
			break
		}
		if err := pace.next(ctx); err != nil {
			return r, fmt.Errorf("prune: %w", err)
		}
	}
	if err := pruneStats(ctx, db, r.Cutoff); err != nil {
		return r, err
	}
	r.ExpiredKeys, err = expireKeys(ctx, db, retention.Keys)
	return r, err
}

// pruneStats deletes the delivery counts of minutes before cutoff, with
// the ledger rows of that age.
func pruneStats(ctx context.Context, db *sql.DB, cutoff time.Time) error {
	if _, err := db.ExecContext(ctx, `DELETE FROM delivery_stat WHERE minute < $1`, cutoff); err != nil {
		return fmt.Errorf("prune delivery stats: %w", err)
	}
	return nil
}

// PruneArgs is the periodic prune job.
type PruneArgs struct{}

// Kind names the job in River.
func (PruneArgs) Kind() string { return "prune_ledger" }

// PruneWorker deletes settled rows past the retention.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	DB        *sql.DB
	Retention Retention
	Logger    *zap.Logger
}

// Work prunes once.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	if w.Retention.Rows <= 0 {
		// A job left from a run with retention on: with it off, nothing
		// is pruned (a zero retention would be every settled row).
		return river.JobCancel(errors.New("RETENTION is off: nothing is pruned"))
	}
	r, err := prune(ctx, w.DB, w.Retention, false)
	if err != nil {
		return err
	}
	w.Logger.Info("pruned settled ledger rows", zap.Int64("rows", r.Rows), zap.Time("cutoff", r.Cutoff),
		zap.Int64("kept_keys", r.KeptKeys), zap.Int64("expired_keys", r.ExpiredKeys))
	return nil
}

// Timeout lets a large backlog of prunable rows finish.
func (w *PruneWorker) Timeout(*river.Job[PruneArgs]) time.Duration { return 30 * time.Minute }

// PrunePeriodically returns the periodic job that runs PruneWorker every
// interval on the elected leader, and once at start.
func PrunePeriodically(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "prune_ledger"})
}
