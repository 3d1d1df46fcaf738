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
// whose keys are kept and that the lifecycle lets prune take (settled or
// erased); rows a claim or apply holds are skipped and taken next time.
// When the database has sessions whose snapshots its role cannot see, it
// deletes nothing and returns ErrHiddenSessions. With dryRun it only
// counts the ledger rows.
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
	// Checked before the keys are kept, so that a prune that cannot wait
	// writes nothing, and again once the wait is over: a session that
	// connected in between may hold a snapshot older than the keys.
	if err := sessionsVisible(ctx, db); err != nil {
		return r, err
	}
	var err error
	if r.KeptKeys, err = keepKeys(ctx, db, r.Cutoff); err != nil {
		return r, err
	}
	if err := waitOlderSnapshots(ctx, db); err != nil {
		return r, err
	}
	if err := sessionsVisible(ctx, db); err != nil {
		return r, err
	}
	pace := newPacer()
	for {
		// The guard is checked on each row under the lock FOR UPDATE
		// takes: a row another path moved meanwhile stays.
		res, err := db.ExecContext(ctx, `
			DELETE FROM webhook_event WHERE id IN (
				SELECT id FROM webhook_event e
				WHERE `+guardSQL(ActorPrune, "e")+` AND received_at < $1 AND `+keptKeySQL("e")+`
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

// ErrHiddenSessions is Prune's refusal when the database has sessions of a
// role whose snapshots prune's own role cannot see in pg_stat_activity: it
// cannot wait for them, and a claim on a snapshot older than the kept keys
// would claim a pruned event again. Nothing is deleted; the error names
// the privilege that lifts it.
var ErrHiddenSessions = errors.New("prune cannot see every session on the database")

// hiddenSessionsSQL counts the sessions on this database whose snapshots
// pg_stat_activity hides from the current role, and names their roles.
//
// PostgreSQL shows a session's details to a role that has the privileges
// of the session's role or of pg_read_all_stats (a superuser has both).
// To any other role the session's row is there, with its pid, database
// and user, but its backend_type, state, query and times are NULL, so
// waitOlderSnapshots, which waits for client backends, passes it by
// whatever snapshot it holds. Which columns are hidden differs between
// versions (15 still shows backend_xmin), and a NULL is also what an idle
// session shows, so a hidden row is not told by its NULLs: the statement
// applies PostgreSQL's own rule, pg_has_role(..., 'USAGE') being the
// privileges of that role. Rows without a user are background processes
// (autovacuum), which claim nothing.
const hiddenSessionsSQL = `
	SELECT count(*), coalesce(string_agg(DISTINCT usename::text, ', '), ''), current_user::text
	FROM pg_stat_activity
	WHERE datname = current_database() AND pid <> pg_backend_pid() AND usesysid IS NOT NULL
		AND NOT pg_has_role('pg_read_all_stats', 'USAGE') AND NOT pg_has_role(usesysid, 'USAGE')`

// sessionsVisible returns ErrHiddenSessions when the database has a
// session whose snapshot prune cannot see: the wait for older snapshots
// would pass it by. A database where every session is prune's own role
// needs no privilege.
func sessionsVisible(ctx context.Context, db *sql.DB) error {
	var (
		n         int
		roles, me string
	)
	if err := db.QueryRowContext(ctx, hiddenSessionsSQL).Scan(&n, &roles, &me); err != nil {
		return fmt.Errorf("prune: read pg_stat_activity: %w", err)
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d session(s) of role(s) %s are hidden from role %s in pg_stat_activity, so prune cannot wait "+
		"for their snapshots; nothing was deleted: GRANT pg_read_all_stats TO %s, or run every session on this database as %s",
		ErrHiddenSessions, n, roles, me, me, me)
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
	if errors.Is(err, ErrHiddenSessions) {
		// No retry sees more: the job is cancelled with the reason, and
		// the next hour's run tries again.
		w.Logger.Error("prune refused: it cannot see every session on the database", zap.Error(err))
		return river.JobCancel(err)
	}
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
	return leaderPeriodically(interval, PruneArgs{})
}
