package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// The floors: the least any receiver of this design can spend on an event
// on this machine, measured in the same run. A receiver that verifies and
// claims over HTTP and applies in a transaction of its own pays at least
// the HTTP exchange (both ends), the claim's database work (the batched
// ceiling) and the apply's database work (the apply floor). On two cores
// shared by the load, the service and PostgreSQL, a rate is the CPU
// available divided by the CPU an event costs everywhere, so the floors
// bound the ratios any such receiver can reach against the baselines.
//
// Here too is the plain design as a receiver (plainBehindHTTP): the plain
// one-transaction claim behind the same HTTP, with the verification and
// parsing any receiver must do.

// applyFloorBatch is the apply floor's batch: about what group commit
// claims in one transaction at peak with 64 clients.
const applyFloorBatch = 20

// httpFloor drives the load generator against a server that only does
// HTTP: net/http reads each body and answers 200 with a small JSON object.
func httpFloor(ctx context.Context, m *meter, gen *payloads, events, clients int) (sqlRun, error) {
	return serveRate(ctx, m, gen, events, clients, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answerClaimed(w)
	}))
}

// plainBehindHTTP is the plain design as a webhook receiver: the plain
// one-transaction claim (stmt, with the body as body makes it) behind a
// net/http server that, for each request, reads the body, verifies its
// signature and reads the event's id and type with hookledger's own
// provider code, then claims it on a pool of clients connections and
// answers 200. No framework, no logging, no metrics, no job queue client:
// the cheapest honest receiver of that design, measured as the service
// is, over HTTP from the same load generator.
func plainBehindHTTP(ctx context.Context, m *meter, url, stmt string, body func([]byte) any, gen *payloads, events, clients int) (sqlRun, error) {
	pool, err := benchPool(ctx, url, clients)
	if err != nil {
		return sqlRun{}, err
	}
	defer pool.Close()
	secrets := [][]byte{[]byte(benchSecret)}
	return serveRate(ctx, m, gen, events, clients, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := provider.Lookup(strings.TrimPrefix(r.URL.Path, "/webhooks/"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		// One allocation for a body up to 64 KB that declares its length.
		var buf bytes.Buffer
		buf.Grow(int(min(max(r.ContentLength, 0), 64<<10)) + bytes.MinRead)
		if _, err := buf.ReadFrom(io.LimitReader(r.Body, naiveMaxBody+1)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if buf.Len() > naiveMaxBody {
			http.Error(w, "body over 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		b := buf.Bytes()
		if _, err := p.Verify(r.Header, b, secrets, time.Now(), 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		ev, err := p.Parse(r.Header, b, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := pool.Exec(r.Context(), stmt, ev.ID, ev.Type, body(b)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		answerClaimed(w)
	}))
}

// naiveMaxBody is the plain receiver's body limit, hookledger's default.
const naiveMaxBody = 1 << 20

func answerClaimed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"claimed"}`)
}

// serveRate drives the load generator against h, served by net/http in
// the bench process: the server's CPU and the generator's are counted
// together, as load.
func serveRate(ctx context.Context, m *meter, gen *payloads, events, clients int, h http.Handler) (sqlRun, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return sqlRun{}, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: loadTimeout}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	snap := m.snapshot(ctx)
	start := time.Now()
	_, errs := drive(ctx, "http://"+ln.Addr().String(), gen, events, clients, 0)
	run := sqlRun{Rate: float64(events) / time.Since(start).Seconds(), CPU: m.since(ctx, snap, events)}
	if errs > 0 {
		return sqlRun{}, fmt.Errorf("%d request(s) failed", errs)
	}
	return run, nil
}

// applyFloor applies the events gen's batched ceiling claimed, in plain
// SQL: batches of applyFloorBatch events, each one round trip and one
// transaction, from clients connections. A batch settles its ledger rows
// and reads their payloads back, as an apply must to hand them to a
// handler, and moves each event's subscription forward under the version
// guard, on rows that exist, as at steady state. No job queue, no decode,
// no handler: what any apply of these events writes and reads.
func applyFloor(ctx context.Context, m *meter, url string, gen *payloads, events, clients int) (sqlRun, error) {
	objects := make([]string, benchObjects)
	for i := range objects {
		objects[i] = benchObjectID("sub_", i)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return sqlRun{}, err
	}
	_, err = conn.Exec(ctx, `
		INSERT INTO subscription (namespace, provider, external_id, status, version)
		SELECT 'stripe', 'stripe', id, 'active', 0 FROM unnest($1::text[]) AS id
		ON CONFLICT DO NOTHING`, objects)
	conn.Close(ctx)
	if err != nil {
		return sqlRun{}, err
	}
	run, err := runSQL(ctx, m, url, events, clients, applyFloorBatch, func(pool *pgxpool.Pool, first, n int) error {
		namespaces, ids, subs := make([]string, n), make([]string, n), make([]string, n)
		versions := make([]int64, n)
		for j := range n {
			d := gen.event(first + j)
			namespaces[j], ids[j] = d.Provider, d.ID
			i := gen.base + first + j
			subs[j], versions[j] = benchObjectID("sub_", i), int64(i)
		}
		var b pgx.Batch
		b.Queue(`
			UPDATE webhook_event e SET status = 'settled', settled_at = now(), attempts = e.attempts + 1
			FROM unnest($1::text[], $2::text[]) AS k(namespace, event_id)
			WHERE e.namespace = k.namespace AND e.event_id = k.event_id AND e.status <> 'settled'
			RETURNING e.payload`, namespaces, ids)
		b.Queue(`
			UPDATE subscription t SET status = 'active', version = u.version, event_id = u.event_id, updated_at = now()
			FROM (SELECT DISTINCT ON (external_id) * FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(external_id, version, event_id)
				ORDER BY external_id, version DESC) u
			WHERE t.namespace = 'stripe' AND t.provider = 'stripe' AND t.external_id = u.external_id AND t.version < u.version`,
			subs, versions, ids)
		br := pool.SendBatch(ctx, &b)
		rows, err := br.Query()
		if err == nil {
			settled := 0
			for rows.Next() {
				var payload []byte
				if err = rows.Scan(&payload); err != nil {
					break
				}
				settled++
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
			if err == nil && settled != n {
				err = fmt.Errorf("settled %d of %d events", settled, n)
			}
		}
		if err == nil {
			_, err = br.Exec()
		}
		return errors.Join(err, br.Close())
	})
	if err != nil {
		return sqlRun{}, err
	}
	// Batches commit in any order, so one may find its subscriptions
	// already moved past it by a later one, as an apply of stale events
	// does. What must hold at the end is that every subscription carries
	// its last event's version: a floor whose update wrote nothing fails.
	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		return sqlRun{}, err
	}
	defer conn.Close(ctx)
	last := make([]int64, benchObjects)
	for i := 1; i <= events; i++ {
		last[(gen.base+i)%benchObjects] = int64(gen.base + i)
	}
	var wrong int
	if err := conn.QueryRow(ctx, `
		SELECT count(*) FROM unnest($1::text[], $2::bigint[]) AS w(external_id, version)
		LEFT JOIN subscription t ON t.namespace = 'stripe' AND t.provider = 'stripe' AND t.external_id = w.external_id
		WHERE w.version > 0 AND t.version IS DISTINCT FROM w.version`, objects, last).Scan(&wrong); err != nil {
		return sqlRun{}, err
	}
	if wrong > 0 {
		return sqlRun{}, fmt.Errorf("%d subscriptions do not carry their last event's version", wrong)
	}
	return run, nil
}

// floor is the least CPU an event costs a receiver of this design, from
// the floors and the batched ceiling of the same run, in milliseconds.
type floor struct {
	HTTP  float64 `json:"http_ms"`
	Claim float64 `json:"claim_ms"`
	Apply float64 `json:"apply_ms"`
	Total float64 `json:"total_ms"`
	// BestToPlain and BestToReference are the most ingest with its apply
	// could reach against the baselines when every phase is CPU-bound:
	// their CPU per event over the floor's.
	BestToPlain     float64 `json:"best_ingest_to_plain_sql"`
	BestToReference float64 `json:"best_ingest_to_reference"`
	// Service is the service's end-to-end CPU per event (service,
	// backends, load) over the floor's.
	Service float64 `json:"end_to_end_cpu_to_floor"`
}

func newFloor(r *Report) floor {
	f := floor{
		HTTP:  r.HTTPFloor.CPU.Load,
		Claim: r.Batched.CPU.Backends,
		Apply: r.ApplyFloor.CPU.Backends + r.ApplyFloor.CPU.Load,
	}
	f.Total = f.HTTP + f.Claim + f.Apply
	if f.Total > 0 {
		f.BestToPlain = (r.PlainSQL.CPU.Backends + r.PlainSQL.CPU.Load) / f.Total
		f.BestToReference = (r.Reference.CPU.Backends + r.Reference.CPU.Load) / f.Total
		f.Service = (r.EndToEndCPU.Service + r.EndToEndCPU.Backends + r.EndToEndCPU.Load) / f.Total
	}
	return f
}
