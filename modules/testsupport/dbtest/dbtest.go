// Package dbtest gives each test a real PostgreSQL database of its own:
// created from a migrated template (built once per migration set) and
// dropped when the test ends. The server is TEST_DATABASE_URL when set,
// else a local one, else a throwaway cluster (see devdb).
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// Patience is how long a test waits for an outcome that takes
// milliseconds on an idle machine (a row to settle, a server to answer).
// Test runs share a loaded two-core machine, where the same outcome can
// take thousands of times as long: a poll that gives up sooner fails a
// correct product.
const Patience = 2 * time.Minute

// Eventually polls cond until it holds, for at most Patience, and fails
// the test with msgAndArgs when it never does. Unlike require.Eventually
// it calls cond on the test's own goroutine, so cond may use require (a
// failed query fails the test instead of a goroutine of testify's).
func Eventually(t testing.TB, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			msg := "condition never held"
			if len(msgAndArgs) > 0 {
				if f, ok := msgAndArgs[0].(string); ok {
					msg = fmt.Sprintf(f, msgAndArgs[1:]...)
				}
			}
			t.Fatalf("%s within %v", msg, Patience)
		}
		time.Sleep(10 * time.Millisecond) // the poll's interval, inside its deadline
	}
}

// MaxConns caps each test database's pool. PostgreSQL's connections are
// shared by every test running on the server, and by every test run on
// the machine: parallel tests multiply pools, so each stays small.
const MaxConns = 6

// DB is one test's database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
	SQL  *sql.DB
}

var (
	adminOnce sync.Once
	adminURL  string
	adminErr  error
)

// lockKey serialises template builds and clones across test processes.
const lockKey = 0x686f6f6b // "hook"

// Admin returns the URL of the test server's maintenance database.
func Admin(t testing.TB) string {
	t.Helper()
	adminOnce.Do(func() {
		adminURL, adminErr = devdb.Server(context.Background(), os.Getenv("TEST_DATABASE_URL"),
			func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	})
	if adminErr != nil {
		t.Fatalf("test database: %v", adminErr)
	}
	return adminURL
}

// New returns a fresh, fully migrated database.
func New(t testing.TB) *DB {
	t.Helper()
	return create(t, template(t))
}

// Empty returns a fresh database with nothing in it.
func Empty(t testing.TB) *DB {
	t.Helper()
	return create(t, "template0")
}

func create(t testing.TB, from string) *DB {
	t.Helper()
	ctx := context.Background()
	admin := Admin(t)
	name := "hookledger_test_" + randomHex(6)
	withLock(t, admin, func(conn *pgx.Conn) {
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{from}.Sanitize()))
		if err != nil {
			t.Fatalf("create test database: %v", err)
		}
	})
	url, err := devdb.WithDatabase(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	db := &DB{Name: name, URL: url, Pool: pool, SQL: stdlib.OpenDBFromPool(pool)}
	t.Cleanup(func() {
		db.SQL.Close()
		pool.Close()
		if err := devdb.DropDatabase(context.Background(), admin, name); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	return db
}

// Listener returns a one-connection pool for River's LISTEN.
func (d *DB) Listener(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Count runs a counting query and returns its result.
func (d *DB) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.SQL.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Queryer runs a query: a *sql.DB or a *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Strings runs a query of one text column and returns its rows' values.
func Strings(t testing.TB, q Queryer, query string, args ...any) []string {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

var (
	templateMu   sync.Mutex
	templateName string
)

// template builds, once per set of migration files, a migrated database
// that New clones.
func template(t testing.TB) string {
	t.Helper()
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName != "" {
		return templateName
	}
	ctx := context.Background()
	admin := Admin(t)
	name := "hookledger_tmpl_" + migrationsHash(t)
	withLock(t, admin, func(conn *pgx.Conn) {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			return
		}
		building := name + "_build"
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		url, err := devdb.WithDatabase(admin, building)
		if err != nil {
			t.Fatal(err)
		}
		ccfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		if err := migrations.Up(stdlib.OpenDB(*ccfg)); err != nil {
			t.Fatalf("migrate template: %v", err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s",
			pgx.Identifier{building}.Sanitize(), pgx.Identifier{name}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	})
	templateName = name
	return name
}

// withLock runs fn holding a server-wide advisory lock.
func withLock(t testing.TB, admin string, fn func(*pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test server: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, lockKey) //nolint:errcheck
	fn(conn)
}

func migrationsHash(t testing.TB) string {
	t.Helper()
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Ent returns an ent client on the database.
func (d *DB) Ent() *ent.Client {
	return ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, d.SQL)))
}
