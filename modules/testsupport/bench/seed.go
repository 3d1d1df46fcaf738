package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// A seeded ledger is what months of traffic leave in webhook_event: real
// provider payloads of the types the shipped modules apply, each row with
// ids of its own, received over seedSpan with a fifth of them in the last
// day, nearly all settled as an apply settles them, about one in
// seedFailedEvery failed with its failure log, a few discarded and the
// newest few still claimed. One set-based statement writes each chunk of
// seedChunk rows: PostgreSQL builds the rows from generate_series, so a
// chunk costs one round trip whatever its size.

// seedTemplate is a real payload from testdata and how a seeded row of its
// type looks. Its literals are replaced by format() placeholders: %1$s the
// event id, %2$s the object key (24 characters, one of seedObjects), %3$s
// the Unix time the event happened, %4$s the same time in RFC 3339, %5$s
// 40 hex digits of the row's own.
type seedTemplate struct {
	provider, typ, file string
	// weight is the rows of this type in every seedWeights rows.
	weight int
	// idFormat makes the event id from %1$s, the row number in 20 digits,
	// %2$s its 8 hex digits and %3$s the number in 12 digits.
	idFormat string
	// headers is the JSON object the receiver keeps of the delivery's
	// headers, with %1$s the event id and %2$s the Unix time.
	headers string
	// module applies the type; handler is the name a failure log gives
	// the handler, failure the error a failed row carries.
	module, handler, failure string
	// timed: the provider signs a time, so the row has occurred_at and
	// clock_skew_ms. digest: the provider signs only the body, so the row
	// has a body_digest.
	timed, digest bool
	subs          []seedSub
}

// seedSub replaces every occurrence of a literal of the payload.
type seedSub struct{ old, new string }

func stripeSeed(typ, file, object, prefix, eventID, created, handler, failure string) seedTemplate {
	return seedTemplate{
		provider: "stripe", typ: typ, file: file, idFormat: "evt_seed%1$s",
		headers: `{"User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}`,
		module:  strings.Split(handler, ".")[0], handler: handler, failure: handler + ": " + failure, timed: true,
		subs: []seedSub{
			{quoted(eventID), `"%1$s"`},
			{`"created": ` + created, `"created": %3$s`},
			{object, prefix + "%2$s"},
		},
	}
}

// seedTemplates are the seeded types, files relative to testdata/providers.
var seedTemplates = []seedTemplate{
	withWeight(6, stripeSeed("customer.subscription.updated", "stripe/customer.subscription.updated.json",
		"sub_1Pgc6rB7WZ01zgkWNy0Cn5nw", "sub_", "evt_composed_sub_updated_0002", "1234567960",
		"subscription.applyStripe", "upsert stripe subscription: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03)")),
	withWeight(4, stripeSeed("payment_intent.succeeded", "stripe/payment_intent.succeeded.json",
		"pi_1PgafyB7WZ01zgkWSjxsAJo3", "pi_", "evt_composed_pi_succeeded_0005", "1234567995",
		"payment.stripePaymentIntent", "merge 1 payment(s): ERROR: deadlock detected (SQLSTATE 40P01)")),
	withWeight(4, stripeSeed("invoice.paid", "stripe/invoice.paid.json",
		"in_1Pgc6tB7WZ01zgkWu9fdqL6I", "in_", "evt_composed_invoice_paid_0004", "1234567990",
		"payment.stripeInvoicePaid", "merge 1 payment(s): ERROR: canceling statement due to statement timeout (SQLSTATE 57014)")),
	withWeight(1, stripeSeed("charge.refunded", "../corpus/stripe/charge.refunded.json",
		"ch_1PgafuB7WZ01zgkWXYmPNZs8", "ch_", "evt_1Corpuscbf55d2ca2dc0f", "1767227640",
		"payment.stripeChargeRefunded", "merge 1 payment(s): ERROR: could not serialize access due to concurrent update (SQLSTATE 40001)")),
	{
		provider: "github", typ: "push", file: "github/push.default.json", weight: 3, idFormat: "%2$s-5eed-4000-8000-%3$s",
		headers: `{"User-Agent": "GitHub-Hookshot/9729b30", "X-Github-Event": "push", "X-Github-Delivery": "%1$s", "X-Github-Hook-Id": "292430182"}`,
		module:  "branchhead", handler: "branchhead.applyPush",
		failure: "branchhead.applyPush: upsert branch head: ERROR: canceling statement due to statement timeout (SQLSTATE 57014)",
		digest:  true,
		subs: []seedSub{
			{`"before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246"`, `"before": "%5$s"`},
			{`"pushed_at": 1557933657`, `"pushed_at": %3$s`},
			{`"full_name": "Codertocat/Hello-World"`, `"full_name": "seed/repository-%2$s"`},
		},
	},
	{
		provider: "standard", typ: "usage.recorded", file: "../corpus/standard/usage.recorded.1.json", weight: 2, idFormat: "msg_seed%1$s",
		headers: `{"User-Agent": "Svix-Webhooks/1.62.0", "Webhook-Id": "%1$s", "Webhook-Timestamp": "%2$s"}`,
		module:  "usage", handler: "usage.apply", failure: "usage.apply: usage.recorded without customer_id or metric",
		timed: true,
		subs: []seedSub{
			{`"timestamp":"2026-01-01T00:00:00Z"`, `"timestamp":"%4$s"`},
			{`"cus_corpus_1"`, `"cus_%2$s"`},
		},
	},
}

func withWeight(w int, t seedTemplate) seedTemplate { t.weight = w; return t }

const (
	// seedSpan is how far back the seeded rows go: inside the default
	// RETENTION (90 days) by an hour, so that the service's prune job
	// finds nothing to delete while it is measured.
	seedSpan = 90*24*time.Hour - time.Hour
	// seedRecentShare of the rows were received in the last 24 hours.
	seedRecentShare = 5 // one in
	// seedFailedEvery: one row in this many failed.
	seedFailedEvery = 1000
	// seedDiscardedEvery: one row in this many was discarded.
	seedDiscardedEvery = 20000
	// seedObjects is how many objects (subscriptions, payments, customers,
	// repositories) the seeded events are about.
	seedObjects = 20000
	// seedChunk is the rows one statement inserts.
	seedChunk = 250_000
	// seedFailures is the failed attempts of a failed row, each in its
	// failure log.
	seedFailures = 3
)

// seedClaimed is how many of the newest rows are still claimed: in
// flight, as at any moment of steady traffic.
func seedClaimed(rows int) int { return min(10, max(rows/1000, 1)) }

// seedRows is the templates as seedSQL takes them: one array per field,
// each template repeated by its weight.
type seedRows struct {
	provider, typ, body, id, headers, module, handler, failure []string
	timed, digest                                              []bool
}

// loadSeedTemplates reads the templates' payloads from dir
// (testdata/providers) and turns their literals into placeholders.
func loadSeedTemplates(dir string) (*seedRows, error) {
	r := &seedRows{}
	for _, t := range seedTemplates {
		b, err := os.ReadFile(filepath.Join(dir, t.file))
		if err != nil {
			return nil, fmt.Errorf("seed payload (run from the repository root or set --testdata): %w", err)
		}
		body := strings.ReplaceAll(string(b), "%", "%%")
		for _, s := range t.subs {
			if !strings.Contains(body, s.old) {
				return nil, fmt.Errorf("seed payload %s: %q not found", t.file, s.old)
			}
			body = strings.ReplaceAll(body, s.old, s.new)
		}
		for range t.weight {
			r.provider, r.typ, r.body = append(r.provider, t.provider), append(r.typ, t.typ), append(r.body, body)
			r.id, r.headers = append(r.id, t.idFormat), append(r.headers, t.headers)
			r.module, r.handler, r.failure = append(r.module, t.module), append(r.handler, t.handler), append(r.failure, t.failure)
			r.timed, r.digest = append(r.timed, t.timed), append(r.digest, t.digest)
		}
	}
	return r, nil
}

func (r *seedRows) args() []any {
	return []any{r.provider, r.typ, r.body, r.id, r.headers, r.module, r.handler, r.failure, r.timed, r.digest}
}

// seedSQL inserts rows $1 to $2 of a seeded ledger of $3 rows: $4 and $5
// are the Unix time of the first row and the seconds between rows received
// before the last day, $6 and $7 the same for the rows of the last day, $8
// how many rows are in the last day, $9 how many newest rows are claimed;
// from $10 the templates (seedRows), row g.i taking template g.i mod their
// count. Rows are built in generate_series' order, each template's fields
// read by subscript, so that no join or sort stands between the series
// and the insert.
const seedSQL = `
INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, last_error,
	received_at, settled_at, occurred_at, headers, secret_index, clock_skew_ms, replayed, failures, failing_since,
	handlers, failure_log, discard_reason, body_digest)
SELECT t.provider, e.id, t.provider, t.provider, t.typ, p.payload, s.status,
	CASE s.status WHEN 'settled' THEN 1 WHEN 'failed' THEN %[1]d WHEN 'discarded' THEN 1 ELSE 0 END,
	CASE WHEN s.status IN ('failed', 'discarded') THEN t.failure END,
	w.at,
	CASE WHEN s.status = 'settled' THEN w.at + (20 + g.i %% 180) * interval '1 millisecond' END,
	CASE WHEN t.timed THEN w.occurred END,
	format(t.headers, e.id, extract(epoch FROM w.occurred)::bigint)::jsonb,
	0,
	CASE WHEN t.timed THEN (extract(epoch FROM w.at - w.occurred) * 1000)::bigint END,
	false,
	CASE s.status WHEN 'failed' THEN %[1]d WHEN 'discarded' THEN 1 ELSE 0 END,
	CASE WHEN s.status IN ('failed', 'discarded') THEN w.at + interval '1 second' END,
	CASE WHEN s.status = 'settled' THEN jsonb_build_array(t.module) END,
	CASE WHEN s.status IN ('failed', 'discarded') THEN (
		SELECT jsonb_agg(jsonb_build_object('attempt', a, 'job_id', g.i, 'at', w.at + (2 ^ a - 1) * interval '1 second',
			'handler', t.handler, 'error', t.failure) ORDER BY a)
		FROM generate_series(1, CASE s.status WHEN 'failed' THEN %[1]d ELSE 1 END) AS a) END,
	CASE WHEN s.status = 'discarded' THEN 'test-mode event sent to the live endpoint' END,
	CASE WHEN t.digest THEN 'sha256:' || encode(sha256(convert_to(t.typ || p.payload, 'UTF8')), 'hex') END
FROM generate_series($1::bigint, $2::bigint) AS g(i)
CROSS JOIN LATERAL (SELECT g.i %% cardinality($10::text[]) + 1 AS k) AS k
CROSS JOIN LATERAL (SELECT ($10::text[])[k.k] AS provider, ($11::text[])[k.k] AS typ, ($12::text[])[k.k] AS body,
	($13::text[])[k.k] AS id_format, ($14::text[])[k.k] AS headers, ($15::text[])[k.k] AS module,
	($16::text[])[k.k] AS handler, ($17::text[])[k.k] AS failure, ($18::boolean[])[k.k] AS timed,
	($19::boolean[])[k.k] AS digest) AS t
CROSS JOIN LATERAL (SELECT to_timestamp(CASE WHEN g.i <= $3::bigint - $8::bigint
	THEN $4::float8 + (g.i - 1) * $5::float8
	ELSE $6::float8 + (g.i - ($3::bigint - $8::bigint)) * $7::float8 END) AS at) AS w0
CROSS JOIN LATERAL (SELECT w0.at, date_trunc('second', w0.at - (80 + g.i %% 900) * interval '1 millisecond') AS occurred) AS w
CROSS JOIN LATERAL (SELECT format(t.id_format, lpad(g.i::text, 20, '0'), lpad(to_hex(g.i), 8, '0'), lpad(g.i::text, 12, '0')) AS id) AS e
CROSS JOIN LATERAL (SELECT format(t.body, e.id, 'seed' || lpad((g.i %% %[2]d)::text, 20, '0'),
	extract(epoch FROM w.occurred)::bigint, to_char(w.occurred AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
	md5(e.id) || left(md5(g.i::text), 8)) AS payload) AS p
CROSS JOIN LATERAL (SELECT CASE
	WHEN g.i > $3::bigint - $9::bigint THEN 'claimed'
	WHEN g.i %% %[3]d = %[3]d / 2 THEN 'failed'
	WHEN g.i %% %[4]d = 1 THEN 'discarded'
	ELSE 'settled' END AS status) AS s`

// seedDuplicateEvery: the delivery counts seeded beside the rows answer
// one duplicate for this many claims.
const seedDuplicateEvery = 50

// seedStatsSQL writes the delivery counts the receivers would have
// flushed for the seeded rows: per minute and source, the claims, the
// duplicates (one per seedDuplicateEvery claims) and the tally of the
// secret that verified them ($1, ledger.SecretOutcome), as the overview
// and the admin stats read them. In time order, as the receivers' flushes
// append them.
const seedStatsSQL = `
INSERT INTO delivery_stat (minute, source, outcome, count)
SELECT s.minute, s.source, o.outcome, o.n
FROM (SELECT date_trunc('minute', received_at) AS minute, source, count(*) AS claimed,
		count(*) FILTER (WHERE id %% %[1]d = 0) AS duplicates
	FROM webhook_event GROUP BY 1, 2) AS s
CROSS JOIN LATERAL (VALUES ('claimed', s.claimed), ('duplicate', s.duplicates), ($1::text, s.claimed)) AS o(outcome, n)
WHERE o.n > 0
ORDER BY s.minute
ON CONFLICT (minute, source, outcome) DO UPDATE SET count = delivery_stat.count + EXCLUDED.count`

// seedLedger writes rows seeded rows into db's webhook_event, the newest
// received just before now, in chunks of seedChunk rows, each one
// statement, and says how far it got on logf after each; then the
// delivery counts of those rows (seedStatsSQL). It returns the time the
// inserts took.
func seedLedger(ctx context.Context, db *pgxpool.Pool, dir string, rows int, now time.Time, logf func(string, ...any)) (time.Duration, error) {
	templates, err := loadSeedTemplates(dir)
	if err != nil {
		return 0, err
	}
	recent := rows / seedRecentShare
	old := rows - recent
	day := (24 * time.Hour).Seconds()
	oldStart := float64(now.Add(-seedSpan).UnixMicro()) / 1e6
	oldStep := (seedSpan.Seconds() - day) / float64(max(old, 1))
	recentStart := float64(now.UnixMicro())/1e6 - day
	recentStep := day / float64(recent+1)
	stmt := fmt.Sprintf(seedSQL, seedFailures, seedObjects, seedFailedEvery, seedDiscardedEvery)
	start := time.Now()
	for lo := 1; lo <= rows; lo += seedChunk {
		hi := min(lo+seedChunk-1, rows)
		args := append([]any{lo, hi, rows, oldStart, oldStep, recentStart, recentStep, recent, seedClaimed(rows)}, templates.args()...)
		// JIT compiling the statement takes a second of each chunk and
		// saves nothing: its work is in the functions it calls.
		if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, stmt, args...)
			return err
		}); err != nil {
			return 0, fmt.Errorf("seed rows %d to %d: %w", lo, hi, err)
		}
		took := time.Since(start)
		logf("bench: seeded %d of %d ledger rows in %.1f s (%.0f rows/s)", hi, rows, took.Seconds(), float64(hi)/took.Seconds())
	}
	// The seeded rows record the first secret, with no fingerprint.
	if _, err := db.Exec(ctx, fmt.Sprintf(seedStatsSQL, seedDuplicateEvery), ledger.SecretOutcome(0, "")); err != nil {
		return 0, fmt.Errorf("seed delivery counts: %w", err)
	}
	logf("bench: seeded the delivery counts of %d ledger rows in %.1f s", rows, time.Since(start).Seconds())
	return time.Since(start), nil
}
