package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"

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
// handler's transaction plans every statement once per connection and by
// index where there is one, without sequential scans, hash or merge joins
// (applyPlanSQL): a handler's statements should reach rows by key, as the
// apply's own do.
type Tx struct {
	*sql.Tx
	Ent  *ent.Client
	jobs JobInserter
	// staged holds the writes handlers staged, in the order they were
	// first staged, until Flush runs them.
	staged []staged
}

// Staged is a write that the handlers of one transaction add to, each for
// its own event, and that runs once for all of them when the last handler
// is done: a batch of n events written in one statement instead of n. The
// apply runs Flush after the handlers of its batch and before it settles
// the batch, in the same transaction; a transaction begun by InTx runs it
// before it commits. Handlers see nothing of another's staged write in the
// database until then, so a module stages only writes that no handler of
// the same batch reads back, other than through the staged value itself.
// A transaction that runs handlers is begun with InTx or InTxWithJobs, or
// runs them through Apply: all three flush.
type Staged interface {
	Flush(ctx context.Context, tx *Tx) error
}

type staged struct {
	key   any
	write Staged
}

// Stage returns the write staged in tx under key, made by mk when tx has
// none yet. key is a module's own unexported comparable type, as for
// context values; any other key panics at once, as context.WithValue does,
// not at the second Stage of a batch.
func Stage[T Staged](tx *Tx, key any, mk func() T) T {
	if key == nil || !reflect.TypeOf(key).Comparable() {
		panic("ledger.Stage: key is nil or not comparable")
	}
	for _, s := range tx.staged {
		if s.key == key {
			return s.write.(T)
		}
	}
	w := mk()
	tx.staged = append(tx.staged, staged{key: key, write: w})
	return w
}

// Flush runs the staged writes, in the order they were first staged, and
// forgets them.
func (tx *Tx) Flush(ctx context.Context) error {
	for len(tx.staged) > 0 {
		w := tx.staged[0].write
		tx.staged = tx.staged[1:]
		if err := w.Flush(ctx, tx); err != nil {
			return &HandlerError{Handler: moduleOf(w) + ".Flush", Err: err}
		}
	}
	tx.staged = nil
	return nil
}

// moduleOf is the package a staged write's type belongs to: the module
// that staged it.
func moduleOf(w Staged) string {
	t := reflect.TypeOf(w)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	return pkg[strings.LastIndexByte(pkg, '/')+1:]
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
// nil, runs what fn staged (Flush) and commits; otherwise, or on panic, it
// rolls back. Its Tx inserts no jobs.
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
	if err := tx.Flush(ctx); err != nil {
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
