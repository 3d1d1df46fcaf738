package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/hookledger/hookledger/ent"
)

// Tx is one database transaction seen two ways: the *sql.Tx that River's
// InsertTx and JobCompleteTx take, and an ent client bound to it.
type Tx struct {
	*sql.Tx
	Ent *ent.Client
}

// InTx begins a transaction on db, hands it to fn and commits when fn
// returns nil; otherwise, or on panic, it rolls back.
func InTx(ctx context.Context, db *sql.DB, fn func(*Tx) error) error {
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer stx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(&Tx{Tx: stx, Ent: ent.NewClient(ent.Driver(txDriver{entsql.Conn{ExecQuerier: stx}}))}); err != nil {
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
