package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent"
)

// Tx is one database transaction seen two ways: the *sql.Tx that River's
// InsertTx takes (and the apply completes its job in), and an ent client
// bound to it. It inserts River jobs too, when it was begun with a River
// client: every transaction a handler runs in was (InsertJob). A
// handler's statements run with PostgreSQL's default planner settings.
type Tx struct {
	*sql.Tx
	Ent  *ent.Client
	jobs JobInserter
	// writes holds what the handlers put in Writes until the transaction
	// writes them (flushWrites); nil when they put nothing.
	writes *pendingWrites
	// writeLockTimeout, in an apply, is the lock_timeout of its staged
	// writes, taken once their keys' advisory locks are held; "" leaves
	// the transaction's own.
	writeLockTimeout string
	// flushing names the Writes whose flush runs now ("module.Flush"),
	// for a flush that is still running when the apply's time ends.
	flushing atomic.Pointer[string]
}

// JobInserter inserts River jobs inside a transaction; *river.Client is one.
type JobInserter interface {
	InsertTx(ctx context.Context, tx *sql.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertManyTx(ctx context.Context, tx *sql.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// errNoJobs is InsertJob in a transaction begun without a River client.
var errNoJobs = errors.New("ledger: this transaction was begun without a River client (InTxWithJobs) and inserts no jobs")

// InsertJob inserts a River job in the transaction, so that the job
// exists exactly when the transaction commits: in a handler, when the
// apply does.
func (tx *Tx) InsertJob(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error {
	return tx.InsertJobs(ctx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
}

// InsertJobs is InsertJob for several jobs, in one statement.
func (tx *Tx) InsertJobs(ctx context.Context, params []river.InsertManyParams) error {
	if len(params) == 0 {
		return nil
	}
	if tx.jobs == nil {
		return errNoJobs
	}
	if _, err := tx.jobs.InsertManyTx(ctx, tx.Tx, params); err != nil {
		what := params[0].Args.Kind() + " job"
		if len(params) > 1 {
			what = fmt.Sprintf("%d jobs", len(params))
		}
		return fmt.Errorf("insert %s: %w", what, err)
	}
	return nil
}

// InTx begins a transaction on db, hands it to fn and, when fn returns
// nil, writes what fn put in Writes (flushWrites) and commits; otherwise,
// or on panic, it rolls back. Its Tx inserts no jobs.
func InTx(ctx context.Context, db *sql.DB, fn func(*Tx) error) error {
	return InTxWithJobs(ctx, db, nil, fn)
}

// InTxWithJobs is InTx whose Tx inserts jobs through jobs. A River worker
// passes the client running its job (river.ClientFromContext), as the apply
// does for its handlers.
func InTxWithJobs(ctx context.Context, db *sql.DB, jobs JobInserter, fn func(*Tx) error) error {
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer stx.Rollback() //nolint:errcheck // a no-op after Commit
	tx := &Tx{Tx: stx, Ent: ent.NewClient(ent.Driver(txDriver{entsql.Conn{ExecQuerier: stx}})), jobs: jobs}
	if err := fn(tx); err != nil {
		return err
	}
	if err := flushWrites(ctx, tx); err != nil {
		return err
	}
	if err := stx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// txDriver runs ent on an open *sql.Tx. ent's own driver insists on a
// *sql.DB when it starts a transaction; this one reuses the open one.
type txDriver struct{ entsql.Conn }

func (d txDriver) Tx(context.Context) (dialect.Tx, error) { return dialect.NopTx(d), nil }
func (txDriver) Close() error                             { return nil }
func (txDriver) Dialect() string                          { return dialect.Postgres }

// entClient is an ent client on db.
func entClient(db *sql.DB) *ent.Client {
	return ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
}
