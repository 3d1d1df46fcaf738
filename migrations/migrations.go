// Package migrations embeds hookledger's SQL migrations (River's own tables
// and the ent tables) and runs them with golang-migrate.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
)

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS

// Status is the database's migration state.
type Status struct {
	Version uint `json:"version"`
	Dirty   bool `json:"dirty"`
	Latest  uint `json:"latest"`
}

// Current reports whether the database is at the latest version and clean.
func (s Status) Current() bool { return s.Version == s.Latest && !s.Dirty }

// Up applies every pending migration. db is closed when it returns, so hand
// it a view of the pool of its own (stdlib.OpenDBFromPool).
func Up(db *sql.DB) error {
	return withMigrate(db, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate up: %w", err)
		}
		return nil
	})
}

// UpTo applies the pending migrations up to version, and no further: an
// upgrade test starts from an earlier schema with it. db is closed when it
// returns.
func UpTo(db *sql.DB, version uint) error {
	return withMigrate(db, func(m *migrate.Migrate) error {
		if err := m.Migrate(version); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate up to %d: %w", version, err)
		}
		return nil
	})
}

// Down reverts one migration, or every migration when all is true. db is
// closed when it returns.
func Down(db *sql.DB, all bool) error {
	return withMigrate(db, func(m *migrate.Migrate) error {
		var err error
		if all {
			err = m.Down()
		} else {
			err = m.Steps(-1)
		}
		if err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate down: %w", err)
		}
		return nil
	})
}

// CurrentStatus reads the database's migration version. db is closed when it
// returns.
func CurrentStatus(db *sql.DB) (Status, error) {
	st := Status{Latest: Latest()}
	err := withMigrate(db, func(m *migrate.Migrate) error {
		v, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("migration version: %w", err)
		}
		st.Version, st.Dirty = v, dirty
		return nil
	})
	return st, err
}

// Latest is the version of the newest embedded migration.
func Latest() uint {
	src, err := iofs.New(FS, ".")
	if err != nil {
		panic(fmt.Sprintf("embedded migrations: %v", err))
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v
		}
		v = next
	}
}

func withMigrate(db *sql.DB, fn func(*migrate.Migrate) error) error {
	src, err := iofs.New(FS, ".")
	if err != nil {
		db.Close()
		return fmt.Errorf("embedded migrations: %w", err)
	}
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		db.Close()
		return fmt.Errorf("migration driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		db.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	defer m.Close()
	return fn(m)
}

// Check reads the applied version straight from golang-migrate's table,
// without taking its lock: cheap enough for a readiness probe.
func Check(ctx context.Context, db *sql.DB) (Status, error) {
	st := Status{Latest: latest}
	err := db.QueryRowContext(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&st.Version, &st.Dirty)
	if errors.Is(err, sql.ErrNoRows) {
		return st, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // no schema_migrations table yet
		return st, nil
	}
	return st, err
}

var latest = Latest()
