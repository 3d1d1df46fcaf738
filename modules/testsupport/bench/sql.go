package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// The database-only baselines: the same work as a claim, done in SQL with
// nothing else on the machine's two cores but PostgreSQL and the load
// loop. The one-transaction baselines are the strongest plain version of
// their designs: one statement per event (the ledger insert and its job
// row in one CTE, so one round trip and one transaction), no library
// between the loop and pgx. The batched ceiling is hookledger's own claim
// statement without the service around it.

// referenceDDL is the reference article's schema, verbatim.
const referenceDDL = `
CREATE TABLE IF NOT EXISTS webhook_event (
    event_id     text PRIMARY KEY,
    source       text        NOT NULL,
    event_type   text        NOT NULL,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'claimed',
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    received_at  timestamptz NOT NULL DEFAULT now(),
    settled_at   timestamptz
);

CREATE INDEX IF NOT EXISTS webhook_event_pending_idx
    ON webhook_event (status, received_at)
    WHERE status IN ('claimed', 'failed');
`

// jobRow is the apply job a claim enqueues, as River stores it, in plain SQL.
const jobRow = `INSERT INTO public.river_job (args, kind, max_attempts, queue)`

// oneTxSQL is the plain one-transaction claim on hookledger's own schema.
func oneTxSQL(table string) string {
	return `WITH c AS (
		INSERT INTO ` + table + ` (namespace, event_id, provider, source, event_type, payload, headers)
		VALUES ('stripe', $1, 'stripe', 'stripe', $2, $3, '{}')
		ON CONFLICT (namespace, event_id) DO NOTHING RETURNING namespace, event_id)
	` + jobRow + ` SELECT jsonb_build_object('namespace', namespace, 'event_id', event_id), 'apply', 25, 'default' FROM c`
}

// referenceSQL is the article's claim statement with its job row.
const referenceSQL = `WITH c AS (
		INSERT INTO reference.webhook_event (event_id, source, event_type, payload)
		VALUES ($1, 'stripe', $2, $3::jsonb)
		ON CONFLICT (event_id) DO NOTHING
		RETURNING event_id)
	` + jobRow + ` SELECT jsonb_build_object('event_id', event_id), 'apply', 25, 'default' FROM c`

// batchJobs is the one job row for the events a batch's insert, the CTE
// c, claimed, as group commit enqueues it.
const batchJobs = jobRow + ` SELECT jsonb_build_object('events', jsonb_agg(jsonb_build_object('namespace', namespace, 'event_id', event_id))), 'apply_batch', 25, 'default' FROM c HAVING count(*) > 0`

// batchStatement is one batch's statement and arguments.
type batchStatement func(batch []benchDelivery) (string, []any)

// ceilingBatch is the batched ceiling: the ledger's own claim statement
// for a batch's rows, and its job row, in one round trip.
func ceilingBatch(batch []benchDelivery) (string, []any) {
	rows := make([]ledger.Claim, len(batch))
	for i, d := range batch {
		rows[i] = ledger.Claim{Namespace: d.Provider, EventID: d.ID, Provider: d.Provider, Source: d.Provider, Type: d.Type, Payload: d.Body}
	}
	claim, args := ledger.ClaimStatement(rows)
	return `WITH c AS (` + claim + `) ` + batchJobs, args
}

// layoutBatch is the batched claim on a layout's copy of the ledger table:
// its payload column has the layout's type, which the ledger's statement
// (text) does not fit.
func layoutBatch(table string, l layout) batchStatement {
	stmt := `WITH c AS (
		INSERT INTO ` + table + ` (namespace, event_id, provider, source, event_type, payload, headers)
		SELECT 'stripe', e, 'stripe', 'stripe', t, p, '{}' FROM unnest($1::text[], $2::text[], $3::` + l.Type + `[]) AS u(e, t, p)
		ON CONFLICT (namespace, event_id) DO NOTHING RETURNING namespace, event_id) ` + batchJobs
	return func(batch []benchDelivery) (string, []any) {
		ids, types, bodies := make([]string, len(batch)), make([]string, len(batch)), make([][]byte, len(batch))
		for j, d := range batch {
			ids[j], types[j], bodies[j] = d.ID, d.Type, d.Body
		}
		var body any = bodies
		if !l.Bytea {
			texts := make([]string, len(batch))
			for j, b := range bodies {
				texts[j] = string(b)
			}
			body = texts
		}
		return stmt, []any{ids, types, body}
	}
}

// payloadArg is a body as a payload column takes it: its bytes for a
// bytea, text for any other type.
func payloadArg(bytea bool) func([]byte) any {
	if bytea {
		return func(b []byte) any { return b }
	}
	return func(b []byte) any { return string(b) }
}

// sqlRun is one measured database-only phase.
type sqlRun struct {
	Rate float64 `json:"events_per_sec"`
	CPU  cpuUse  `json:"cpu"`
}

// benchPool opens a pool of clients connections.
func benchPool(ctx context.Context, url string, clients int) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(clients)
	pcfg.MinConns = int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	// Open every connection before the clock starts.
	conns := make([]*pgxpool.Conn, 0, clients)
	for range clients {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool, nil
}

// sqlRate runs events one-statement claims from clients connections.
func sqlRate(ctx context.Context, m *meter, url string, events, clients int, stmt string, body func([]byte) any, gen *payloads) (sqlRun, error) {
	return runSQL(ctx, m, url, events, clients, 1, func(pool *pgxpool.Pool, first, _ int) error {
		d := gen.event(first)
		_, err := pool.Exec(ctx, stmt, d.ID, d.Type, body(d.Body))
		return err
	})
}

// batchRate claims events in statements of batch rows each from clients
// connections.
func batchRate(ctx context.Context, m *meter, url string, events, clients, batch int, stmt batchStatement, gen *payloads) (sqlRun, error) {
	return runSQL(ctx, m, url, events, clients, batch, func(pool *pgxpool.Pool, first, n int) error {
		ds := make([]benchDelivery, n)
		for j := range ds {
			ds[j] = gen.event(first + j)
		}
		query, args := stmt(ds)
		_, err := pool.Exec(ctx, query, args...)
		return err
	})
}

// runSQL calls do for events in steps of step from clients goroutines,
// each on a connection of its own, and measures the rate and CPU.
func runSQL(ctx context.Context, m *meter, url string, events, clients, step int, do func(pool *pgxpool.Pool, first, n int) error) (sqlRun, error) {
	pool, err := benchPool(ctx, url, clients)
	if err != nil {
		return sqlRun{}, err
	}
	defer pool.Close()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	snap := m.snapshot(ctx)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				first := int(next.Add(int64(step))) - step + 1
				if first > events {
					return
				}
				if err := do(pool, first, min(step, events-first+1)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return sqlRun{}, err
	}
	return sqlRun{Rate: float64(events) / elapsed.Seconds(), CPU: m.since(ctx, snap, events)}, nil
}

// setupReference creates the reference design's table, verbatim, in a
// schema of its own.
func setupReference(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE SCHEMA reference; SET search_path = reference;`+referenceDDL)
	return err
}

// layout is a way of storing the ledger's payload column.
type layout struct {
	Name string
	// Column is the payload column's definition.
	Column string
	// Type is the column's SQL type; Bytea says the driver sends raw bytes.
	Type  string
	Bytea bool
}

// layouts are the payload storage options measured by `bench --storage`.
var layouts = []layout{
	{"jsonb, pglz (PostgreSQL's default)", "jsonb COMPRESSION pglz NOT NULL", "jsonb", false},
	{"jsonb, lz4", "jsonb COMPRESSION lz4 NOT NULL", "jsonb", false},
	{"text, lz4", "text COMPRESSION lz4 NOT NULL", "text", false},
	{"bytea, pglz", "bytea COMPRESSION pglz NOT NULL", "bytea", true},
	{"bytea, lz4", "bytea COMPRESSION lz4 NOT NULL", "bytea", true},
}

// setupLayout copies the ledger table into schema name with the payload
// column stored as l says.
func setupLayout(ctx context.Context, url, name string, l layout) (string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	table := name + ".webhook_event"
	_, err = conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %s; CREATE TABLE %s (LIKE public.webhook_event INCLUDING ALL);
		ALTER TABLE %s DROP COLUMN payload, ADD COLUMN payload %s`, name, table, table, l.Column))
	return table, err
}

// tableSize is the heap, TOAST and index size of table, in bytes per row.
func tableSize(ctx context.Context, url, table string, rows int) (float64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var size int64
	err = conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&size)
	return float64(size) / float64(rows), err
}

// clearJobs empties the job table between phases, so each starts alike.
func clearJobs(ctx context.Context, url string, tables ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `TRUNCATE public.river_job, `+strings.Join(tables, ", "))
	return err
}
