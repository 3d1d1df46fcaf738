package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// payloadsProcess is a process of role all: a claim Store and River
// workers sharing one Payloads. Its handler of invoice.paid records the
// payload each apply handed it. Its claims' jobs linger until the test
// calls release, so that an apply starts only after the claims the test
// made returned.
type payloadsProcess struct {
	*ledgertest.Harness
	store   *ledger.Store
	release func()
	mu      sync.Mutex
	seen    map[string][][]byte
}

func newPayloadsProcess(t *testing.T, logOnly bool) *payloadsProcess {
	t.Helper()
	p := &payloadsProcess{seen: map[string][][]byte{}}
	released := make(chan struct{})
	p.release = sync.OnceFunc(func() { close(released) })
	gate := func(ctx context.Context) {
		select {
		case <-released:
		case <-ctx.Done():
		}
	}
	payloads := ledger.NewPayloads(ledger.PayloadsBytes, ledger.PayloadsAge)
	o := ledger.WithLingerGate(ledger.RiverOptions{Workers: 2, Payloads: payloads, ApplyLinger: time.Hour}, gate)
	p.Harness = ledgertest.NewWith(t, o, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.seen[ev.EventID] = append(p.seen[ev.EventID], ev.Payload)
			return nil
		})
	})
	p.store = ledger.NewStore(p.DB.SQL, p.River, ledger.StoreOptions{Payloads: payloads, LogOnly: logOnly})
	return p
}

func (p *payloadsProcess) applied(id string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.seen[id]...)
}

func (p *payloadsProcess) waitApplied(t *testing.T, id string, times int) [][]byte {
	t.Helper()
	dbtest.Eventually(t, func() bool { return len(p.applied(id)) == times }, "%s never applied %d time(s)", id, times)
	return p.applied(id)
}

func invoice(id string) ledger.Claim {
	// Spaces and an escape the ledger must keep as sent.
	body := fmt.Sprintf("{ \"id\": %q,\n  \"type\": \"invoice.paid\", \"note\": \"caf\\u00e9 \u00e9\" }", id)
	return ledger.Claim{Namespace: "stripe", EventID: id, Provider: "stripe", Source: "stripe", Type: "invoice.paid", Payload: []byte(body)}
}

// TestApplyTakesTheClaimsPayload: in a process that claims and applies,
// the apply hands the handler the body the claim stored, without reading
// it back from the ledger: the very bytes the claim held. A later apply
// of the event (a forced requeue) reads the ledger, and finds the same
// bytes there.
func TestApplyTakesTheClaimsPayload(t *testing.T) {
	t.Parallel()
	p := newPayloadsProcess(t, false)
	ctx := context.Background()
	in := invoice("evt_kept")
	res, err := p.store.Claim(ctx, in)
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	p.release()
	got := p.waitApplied(t, "evt_kept", 1)[0]
	require.Equal(t, in.Payload, got)
	require.Same(t, &in.Payload[0], &got[0], "the claim's own bytes, not a copy read back")

	p.WaitSettled(t, "stripe", "evt_kept")
	var stored string
	require.NoError(t, p.DB.SQL.QueryRow(`SELECT payload FROM webhook_event WHERE event_id = 'evt_kept'`).Scan(&stored))
	require.Equal(t, string(in.Payload), stored, "the ledger holds the body byte for byte")

	res2, err := p.store.Requeue(ctx, "stripe", "evt_kept", true)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res2)
	again := p.waitApplied(t, "evt_kept", 2)[1]
	require.Equal(t, in.Payload, again)
	require.NotSame(t, &in.Payload[0], &again[0], "a second apply reads the ledger")
}

// TestEmptyPayloadsAreStored: a batch whose bodies are all empty stores
// empty payloads, not NULL.
func TestEmptyPayloadsAreStored(t *testing.T) {
	t.Parallel()
	p := newPayloadsProcess(t, false)
	for i, body := range [][]byte{{}, nil} {
		in := invoice(fmt.Sprint("evt_empty_", i))
		in.Payload = body
		res, err := p.store.Claim(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, ledger.Claimed, res)
	}
	require.Equal(t, 2, p.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload = ''`))
}

// TestBatchKeepsOnlyWhatItStored: a group commit's claims keep their
// payloads for the apply, except a key that appears twice in the batch
// (the stored body is the statement's choice) and the duplicates. Every
// event's handler gets the stored body.
func TestBatchKeepsOnlyWhatItStored(t *testing.T) {
	t.Parallel()
	p := newPayloadsProcess(t, false)
	ctx := context.Background()
	b := ledger.NewBatcher(ctx, p.store, 1, 64)
	_, err := p.store.Claim(ctx, invoice("evt_old"))
	require.NoError(t, err)

	twin := invoice("evt_twin")
	twin2 := invoice("evt_twin")
	twin2.Payload = append([]byte(" "), twin.Payload...) // another body under the same id
	claims := []ledger.Claim{invoice("evt_b1"), twin, invoice("evt_old"), invoice("evt_b2"), twin2}
	results := make([]ledger.ClaimResult, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Go(func() {
			var err error
			results[i], err = b.Claim(ctx, c)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	p.release()
	for i, c := range claims {
		if results[i] != ledger.Claimed {
			continue
		}
		got := p.waitApplied(t, c.EventID, 1)[0]
		var stored []byte
		require.NoError(t, p.DB.SQL.QueryRow(`SELECT payload FROM webhook_event WHERE event_id = $1`, c.EventID).Scan(&stored))
		require.Equal(t, string(stored), string(got), "%s: the handler got the stored body", c.EventID)
		if c.EventID != "evt_twin" {
			require.Equal(t, c.Payload, got, c.EventID)
			require.Same(t, &c.Payload[0], &got[0], "%s: kept from its claim", c.EventID)
		}
	}
	p.waitApplied(t, "evt_old", 1)
	for _, c := range claims {
		p.WaitSettled(t, "stripe", c.EventID)
	}
	require.Len(t, p.applied("evt_old"), 1, "a duplicate is not applied")
	require.Len(t, p.applied("evt_twin"), 1)
}

// TestLogOnlyReadsTheLedger: under log-only every apply is forced, and
// reads the payload from the ledger.
func TestLogOnlyReadsTheLedger(t *testing.T) {
	t.Parallel()
	p := newPayloadsProcess(t, true)
	in := invoice("evt_logged")
	_, err := p.store.Claim(context.Background(), in)
	require.NoError(t, err)
	p.release()
	got := p.waitApplied(t, "evt_logged", 1)[0]
	require.Equal(t, in.Payload, got)
	require.NotSame(t, &in.Payload[0], &got[0])
}

// TestPayloadsBounds: the kept payloads stay within their bytes and age,
// oldest dropped first, and a payload is taken once.
func TestPayloadsBounds(t *testing.T) {
	t.Parallel()
	k := func(i int) ledger.EventKey {
		return ledger.EventKey{Namespace: "stripe", EventID: fmt.Sprint("evt_", i)}
	}
	body := func() []byte { return make([]byte, 100) }
	p := ledger.NewPayloads(350, time.Minute)
	t0 := time.Now()
	for i := range 4 {
		ledger.PutPayload(p, k(i), body(), t0)
	}
	_, ok := ledger.TakePayload(p, k(0), t0)
	require.False(t, ok, "the oldest made room")
	for i := 1; i < 4; i++ {
		_, ok := ledger.TakePayload(p, k(i), t0)
		require.True(t, ok, i)
		_, ok = ledger.TakePayload(p, k(i), t0)
		require.False(t, ok, "taken once")
	}
	ledger.PutPayload(p, k(10), body(), t0)
	ledger.PutPayload(p, k(11), body(), t0.Add(2*time.Minute))
	_, ok = ledger.TakePayload(p, k(10), t0.Add(2*time.Minute))
	require.False(t, ok, "aged out")
	_, ok = ledger.TakePayload(p, k(11), t0.Add(4*time.Minute))
	require.False(t, ok, "a take finds it aged out too")
	require.Zero(t, ledger.PayloadBytes(p), "and drops it")
	ledger.PutPayload(p, k(12), make([]byte, 351), t0)
	_, ok = ledger.TakePayload(p, k(12), t0)
	require.False(t, ok, "larger than the budget")
	require.Zero(t, ledger.PayloadBytes(p))

	var none *ledger.Payloads
	ledger.PutPayload(none, k(1), body(), t0)
	_, ok = ledger.TakePayload(none, k(1), t0)
	require.False(t, ok)
}

// TestPayloadsForgetTakenEntries: an entry never taken (its apply ran in
// another process) does not hold on to the entries taken after it.
func TestPayloadsForgetTakenEntries(t *testing.T) {
	t.Parallel()
	k := func(i int) ledger.EventKey {
		return ledger.EventKey{Namespace: "stripe", EventID: fmt.Sprint("evt_", i)}
	}
	p := ledger.NewPayloads(1<<20, time.Minute)
	t0 := time.Now()
	ledger.PutPayload(p, k(-1), make([]byte, 100), t0) // never taken
	peak := 0
	for i := range 100_000 {
		now := t0.Add(time.Duration(i) * time.Millisecond / 2)
		ledger.PutPayload(p, k(i), make([]byte, 100), now)
		_, ok := ledger.TakePayload(p, k(i), now)
		require.True(t, ok)
		n, _ := ledger.PayloadRefs(p)
		peak = max(peak, n)
	}
	require.Less(t, peak, 200, "taken entries are forgotten behind one still kept")
	_, c := ledger.PayloadRefs(p)
	require.Less(t, c, 1000)
	require.Equal(t, 100, ledger.PayloadBytes(p))
}
