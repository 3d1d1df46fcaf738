package console_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/console"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// The ledger the plan test reads: planRows rows over 90 days, a fifth of
// them in the last day, as the scale benchmark seeds them (bench/seed.go).
const planRows = 100_000

// maxRowsRead is the most rows one scan of webhook_event may read (return
// or filter out) for any operator query: a list page bounded by
// ledger.ListScanLimit, with room for rows sharing a received_at. A scan
// of the ledger reads all planRows.
const maxRowsRead = ledger.ListScanLimit + 500

// maxJobsRead is the most River jobs a statement may read: the jobs not
// yet finalized (/metrics), or those of a page's events. River keeps a
// day of finished jobs, planRows/5 and more here.
const maxJobsRead = 1000

// TestOperatorQueriesStayBounded: every statement the console's pages,
// the admin API, the CLI's list and a /metrics scrape send reads a
// bounded part of the ledger through an index, under the plan PostgreSQL
// makes for the values given (a custom plan) and under the generic plan a
// prepared statement switches to after five runs. The statements are
// recorded from the code itself, not copied: the console's pages are
// fetched, and the ledger methods the admin API and the CLI call (List,
// Find, FindJob, CountByStatus, Backlog, DeliveryCounts; they send no SQL
// of their own) and the metrics collector are run with the filters they
// pass. Each is then run again under EXPLAIN ANALYZE.
func TestOperatorQueriesStayBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	seedPlanLedger(t, db)

	rec := &recorder{}
	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	recDB := sql.OpenDB(recConnector{Connector: stdlib.GetConnector(*cfg), rec: rec})
	t.Cleanup(func() { recDB.Close() })
	store := ledger.NewStore(recDB, nil, ledger.StoreOptions{})

	// The console's pages, and the pages their links lead to.
	gin.SetMode(gin.TestMode)
	r := gin.New()
	console.Routes(r, console.Config{
		Auth: func(c *gin.Context) { c.Next() }, Ledger: store, DB: recDB, Stats: ledger.NewDeliveryStats(recDB),
		Sources: []console.Source{
			{Name: "stripe", Provider: "stripe", Fingerprints: []string{"fp_stripe_0", "fp_stripe_1"}},
			{Name: "github", Provider: "github", Fingerprints: []string{"fp_github_0"}},
			{Name: "standard", Provider: "standard", Fingerprints: []string{"fp_standard_0"}},
			{Name: "paddle", Provider: "paddle"},
		},
	})
	get := func(path string) string {
		t.Helper()
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Contains(t, []int{http.StatusOK, http.StatusSeeOther}, w.Code, "%s: %s", path, w.Body.String())
		return w.Body.String()
	}
	next := regexp.MustCompile(`id="next" href="([^"]+)"`)
	for _, path := range []string{
		"/console/", "/console/?window=24h",
		"/console/events", "/console/events?status=claimed", "/console/events?status=failed",
		"/console/events?status=discarded", "/console/events?status=settled", "/console/events?status=processing",
		"/console/events?source=github", "/console/events?source=paddle",
		"/console/events?type=charge.refunded", "/console/events?type=invoice.*", "/console/events?type=nothing.like.it",
		"/console/events?since=2h", "/console/events?until=720h", "/console/events?since=2160h&until=2000h",
		"/console/events?status=failed&source=github", "/console/events?status=settled&type=push&since=48h",
		"/console/events?id=evt_plan_0000099999", "/console/events?id=nothing_like_it", "/console/events?id=evt_plan_00000999",
		"/console/event?namespace=stripe&id=evt_plan_0000051500", "/console/event?id=evt_plan_0000051500",
		"/console/failed", "/console/failed/confirm",
	} {
		body := get(path)
		// The next page, through the cursor its link carries.
		if m := next.FindStringSubmatch(body); m != nil {
			get(html.UnescapeString(m[1]))
		}
	}

	// The admin API and the CLI: what they ask the ledger.
	now := time.Now()
	for _, f := range []ledger.Filter{
		{Limit: 500}, {Status: webhookevent.StatusFailed, Limit: 500}, {Status: webhookevent.StatusSettled, Limit: 50},
		{Namespace: "standard", Limit: 50}, {Namespace: "nowhere", Limit: 50}, {Source: "paddle", Limit: 500},
		{Type: "invoice.paid", Since: now.Add(-24 * time.Hour), Limit: 50}, {Until: now.Add(-30 * 24 * time.Hour), Limit: 500},
		{Status: webhookevent.StatusFailed, Type: "push", Limit: 500},
	} {
		_, cursor, err := store.List(ctx, f)
		require.NoError(t, err)
		if cursor > 0 {
			f.After = cursor
			_, _, err = store.List(ctx, f)
			require.NoError(t, err)
		}
	}
	for _, ns := range []string{"", "stripe"} {
		_, err := store.Find(ctx, ns, "evt_plan_0000051500")
		require.NoError(t, err)
		_, err = store.FindJob(ctx, "stripe", "evt_plan_0000051500")
		require.NoError(t, err)
	}
	_, _, err = store.CountByStatus(ctx)
	require.NoError(t, err)
	_, err = store.Backlog(ctx)
	require.NoError(t, err)
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour} {
		_, err = store.DeliveryCounts(ctx, now.Add(-window))
		require.NoError(t, err)
	}

	// A /metrics scrape.
	metrics := make(chan prometheus.Metric, 100)
	ledger.NewCollector(store).Collect(metrics)
	require.NotEmpty(t, metrics)

	statements := rec.reads()
	require.Greater(t, len(statements), 30, "the surfaces' statements were recorded")
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, st := range statements {
		for _, generic := range []bool{false, true} {
			plan := explain(t, conn.Conn(), st, generic)
			checkPlan(t, st, generic, plan)
		}
	}
}

// seedPlanLedger writes planRows ledger rows, set-based, as the scale
// benchmark seeds them: three sources and six types; one row in 1,000
// failed, one in 20,000 discarded, the newest ten claimed, the rest
// settled; a fifth received in the last day. Beside them, River's jobs of
// the last day's rows and of every unsettled one, each its own and in
// batches of 20 as the claim inserts them, and delivery counts by minute
// for the last day and by ten minutes before, each with its secret's
// tally.
func seedPlanLedger(t *testing.T, db *dbtest.DB) {
	t.Helper()
	_, err := db.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts,
			last_error, received_at, settled_at, secret_index, secret_fingerprint, handlers, failures, failing_since)
		SELECT k.provider, 'evt_plan_' || lpad(g::text, 10, '0'), k.provider, k.provider, k.typ, '{}', s.status,
			CASE s.status WHEN 'claimed' THEN 0 ELSE 1 END,
			CASE WHEN s.status IN ('failed', 'discarded') THEN k.module || '.apply: upstream 503' END,
			w.at, CASE WHEN s.status = 'settled' THEN w.at + interval '120 milliseconds' END,
			g % 2, 'fp_' || k.provider || '_' || g % 2,
			CASE WHEN s.status = 'settled' THEN jsonb_build_array(k.module) END,
			CASE WHEN s.status IN ('failed', 'discarded') THEN 1 ELSE 0 END,
			CASE WHEN s.status IN ('failed', 'discarded') THEN w.at END
		FROM generate_series(1, $1::int) AS g
		CROSS JOIN LATERAL (SELECT (ARRAY['stripe', 'stripe', 'stripe', 'stripe', 'github', 'standard'])[g % 6 + 1] AS provider,
			(ARRAY['customer.subscription.updated', 'invoice.paid', 'payment_intent.succeeded', 'charge.refunded', 'push', 'usage.recorded'])[g % 6 + 1] AS typ,
			(ARRAY['subscription', 'payment', 'payment', 'payment', 'branchhead', 'usage'])[g % 6 + 1] AS module) AS k
		CROSS JOIN LATERAL (SELECT CASE
			WHEN g > $1 - 10 THEN 'claimed'
			WHEN g % 1000 = 500 THEN 'failed'
			WHEN g % 20000 = 1 THEN 'discarded'
			ELSE 'settled' END AS status) AS s
		CROSS JOIN LATERAL (SELECT CASE WHEN g <= $1 * 4 / 5
			THEN now() - interval '90 days' + g * (interval '89 days' / ($1 * 4 / 5))
			ELSE now() - interval '1 day' + (g - $1 * 4 / 5) * (interval '1 day' / ($1 / 5 + 1)) END AS at) AS w`, planRows)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`
		INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, finalized_at, scheduled_at)
		SELECT jsonb_build_object('namespace', namespace, 'event_id', event_id), 'apply_event', 25, 'default',
			CASE status WHEN 'settled' THEN 'completed' WHEN 'failed' THEN 'retryable' WHEN 'discarded' THEN 'cancelled' ELSE 'available' END::river_job_state,
			attempts, CASE WHEN status IN ('settled', 'discarded') THEN received_at END, received_at
		FROM webhook_event WHERE received_at > now() - interval '1 day' OR status <> 'settled';

		INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, finalized_at, scheduled_at)
		SELECT jsonb_build_object('events', jsonb_agg(jsonb_build_object('namespace', namespace, 'event_id', event_id))),
			'apply_batch', 25, 'default', 'completed', 1, max(received_at), max(received_at)
		FROM webhook_event WHERE received_at > now() - interval '2 days' GROUP BY id / 20;

		INSERT INTO delivery_stat (minute, source, outcome, count)
		SELECT m, src, o, 1 + (extract(epoch FROM m)::bigint / 60) % 7
		FROM (SELECT generate_series(date_trunc('minute', now()) - interval '90 days', date_trunc('minute', now()) - interval '1 day', interval '10 minutes')
			UNION ALL SELECT generate_series(date_trunc('minute', now()) - interval '1 day' + interval '1 minute', date_trunc('minute', now()), interval '1 minute')) AS t(m)
		CROSS JOIN unnest(ARRAY['stripe', 'github', 'standard']) AS src
		CROSS JOIN LATERAL unnest(ARRAY['claimed', 'duplicate', 'secret:0:fp_' || src || '_0']) AS o;

		ANALYZE webhook_event; ANALYZE river_job; ANALYZE delivery_stat`)
	require.NoError(t, err)
}

// statement is one statement a surface sent, with its arguments.
type statement struct {
	query string
	args  []any
}

// recorder keeps the statements sent through its connections.
type recorder struct {
	mu    sync.Mutex
	stmts []statement
}

func (r *recorder) add(query string, args []driver.NamedValue) {
	st := statement{query: query}
	for _, a := range args {
		st.args = append(st.args, a.Value)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, st)
}

// reads are the distinct reads recorded: the statements that a plan can
// be asked of (not the delivery counts' flush, an upsert).
func (r *recorder) reads() []statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []statement
	for _, st := range r.stmts {
		q := strings.TrimSpace(st.query)
		if !strings.HasPrefix(q, "SELECT") && !strings.HasPrefix(q, "WITH") {
			continue
		}
		key := fmt.Sprint(q, st.args)
		if !seen[key] {
			seen[key] = true
			out = append(out, st)
		}
	}
	return out
}

// recConnector opens pgx's connections, recorded.
type recConnector struct {
	driver.Connector
	rec *recorder
}

func (c recConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: conn, rec: c.rec}, nil
}

// recConn is pgx's connection, recording the statements it is sent and
// passing on the interfaces database/sql looks for.
type recConn struct {
	driver.Conn
	rec *recorder
}

func (c *recConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.rec.add(query, args)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *recConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.rec.add(query, args)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *recConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *recConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

func (c *recConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *recConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType       string     `json:"Node Type"`
	Relation       string     `json:"Relation Name"`
	Index          string     `json:"Index Name"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// explain runs st under EXPLAIN ANALYZE on conn as a prepared statement,
// as the app's are: with a custom plan for its arguments, or with the
// generic plan PostgreSQL may switch to after five runs. The arguments go
// in as literals (pgx's simple protocol), the prepared statement's
// parameter types being PostgreSQL's own inference.
func explain(t *testing.T, conn *pgx.Conn, st statement, generic bool) planNode {
	t.Helper()
	ctx := context.Background()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	_, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE plan_test AS `+st.query)
	require.NoError(t, err, st.query)
	defer conn.Exec(ctx, `DEALLOCATE plan_test`) //nolint:errcheck // the test fails anyway
	q := `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_test`
	if len(st.args) > 0 {
		params := make([]string, len(st.args))
		for i := range params {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		q += "(" + strings.Join(params, ", ") + ")"
	}
	var out string
	require.NoError(t, conn.QueryRow(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, st.args...)...).Scan(&out), st.query)
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}

// checkPlan fails when a plan scans webhook_event whole or reads more
// than maxRowsRead of its rows in one scan, reads more than maxJobsRead
// of River's jobs, or scans the delivery counts whole (all three grow with
// traffic). The one exception is CountByStatus's exact count of settled
// rows, which runs only on a ledger under ledger.ExactSettledBelow rows.
func checkPlan(t *testing.T, st statement, generic bool, plan planNode) {
	t.Helper()
	if strings.Contains(st.query, `count(*) FROM webhook_event WHERE status = 'settled'`) {
		require.Less(t, planRows, ledger.ExactSettledBelow, "the exact count of settled rows ran on a large ledger")
		return
	}
	mode := "custom plan"
	if generic {
		mode = "generic plan"
	}
	var walk func(n planNode)
	walk = func(n planNode) {
		switch n.Relation {
		case "webhook_event":
			require.NotEqual(t, "Seq Scan", n.NodeType, "%s scans the ledger (%s):\n%s", mode, n.Index, st.query)
			read := (n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * max(n.ActualLoops, 1)
			require.LessOrEqual(t, read, float64(maxRowsRead), "%s reads %.0f ledger rows through %s %s:\n%s %v",
				mode, read, n.NodeType, n.Index, st.query, st.args)
		case "river_job":
			require.NotEqual(t, "Seq Scan", n.NodeType, "%s scans %s:\n%s", mode, n.Relation, st.query)
			read := (n.ActualRows + n.RemovedFilter + n.RemovedRecheck) * max(n.ActualLoops, 1)
			require.LessOrEqual(t, read, float64(maxJobsRead), "%s reads %.0f jobs through %s %s:\n%s %v",
				mode, read, n.NodeType, n.Index, st.query, st.args)
		case "delivery_stat":
			// A time window's generic plan (a third of the table,
			// PostgreSQL assumes) costs more than its custom plans, so it
			// is never the one chosen.
			if !generic {
				require.NotEqual(t, "Seq Scan", n.NodeType, "%s scans %s:\n%s", mode, n.Relation, st.query)
			}
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan)
}
