package ledger_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

func sealerOf(t *testing.T, keys ...[]byte) *ledger.Sealer {
	t.Helper()
	s, err := ledger.NewSealer(keys)
	require.NoError(t, err)
	return s
}

// TestSealedPayloadsAtRest: with payload keys, no stored payload holds a
// plaintext field; reads open them; after a rotation (a new first key, the
// old one kept) old and new payloads open and rekey moves every payload,
// plaintext ones from before encryption too, under the new key; a sealer
// without the key that sealed a payload, or a payload moved to another
// row, fails with a clear error; erase finds the subject in sealed
// payloads.
func TestSealedPayloadsAtRest(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)

	plain := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{})
	_, err := plain.Claim(ctx, claimOf("evt_before", "invoice.paid"))
	require.NoError(t, err)
	sealed := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, oldKey)})
	for _, id := range []string{"evt_sealed", "evt_other"} {
		_, err = sealed.Claim(ctx, claimOf(id, "invoice.paid"))
		require.NoError(t, err)
	}
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE 'sealed:v1:'||$1||':%' AND strpos(payload, 'invoice') = 0`, ledger.KeyID(oldKey)))
	_, err = ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, oldKey))
	require.NoError(t, err)

	r, err := sealed.Find(ctx, "stripe", "evt_sealed")
	require.NoError(t, err)
	require.Equal(t, string(claimOf("evt_sealed", "invoice.paid").Payload), r.Payload)
	got, err := sealed.StoredPayloads(ctx, []ledger.EventKey{{Namespace: "stripe", EventID: "evt_sealed"}, {Namespace: "stripe", EventID: "evt_before"}})
	require.NoError(t, err)
	require.Contains(t, string(got[ledger.EventKey{Namespace: "stripe", EventID: "evt_sealed"}]), `"id":"evt_sealed"`)
	require.Contains(t, string(got[ledger.EventKey{Namespace: "stripe", EventID: "evt_before"}]), `"id":"evt_before"`, "plaintext from before")

	// Without the key, or a wrong one: a clear error, at start-up too.
	_, err = plain.Find(ctx, "stripe", "evt_sealed")
	require.ErrorIs(t, err, ledger.ErrPayloadKey)
	_, err = ledger.CheckSealer(ctx, h.DB.SQL, nil)
	require.ErrorContains(t, err, "PAYLOAD_KEYS is not set")
	_, err = ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, newKey))
	require.ErrorContains(t, err, "PAYLOAD_KEYS cannot open")
	// A sealed payload copied onto another row does not open.
	_, err = h.DB.SQL.Exec(`UPDATE webhook_event SET payload = (SELECT payload FROM webhook_event WHERE event_id = 'evt_sealed') WHERE event_id = 'evt_other'`)
	require.NoError(t, err)
	_, err = sealed.Find(ctx, "stripe", "evt_other")
	require.ErrorContains(t, err, "moved from another row")
	_, err = h.DB.SQL.Exec(`DELETE FROM webhook_event WHERE event_id = 'evt_other'`)
	require.NoError(t, err)

	// Rotation: the new key first, the old one kept to open.
	rotated := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, newKey, oldKey)})
	_, err = rotated.Claim(ctx, claimOf("evt_after", "invoice.paid"))
	require.NoError(t, err)
	rk, err := rotated.Rekey(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), rk.Sealed, "the plaintext row and the old key's")
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE 'sealed:v1:'||$1||':%'`, ledger.KeyID(newKey)))
	rk, err = rotated.Rekey(ctx)
	require.NoError(t, err)
	require.Zero(t, rk.Sealed, "a second run finds nothing left")
	onlyNew := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, newKey)})
	for _, id := range []string{"evt_before", "evt_sealed", "evt_after"} {
		r, err := onlyNew.Find(ctx, "stripe", id)
		require.NoError(t, err, id)
		require.Contains(t, r.Payload, `"id":"`+id+`"`)
	}

	// Erase reads sealed payloads.
	_, err = h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled'`)
	require.NoError(t, err)
	er, err := onlyNew.Erase(ctx, "evt_after", "", false)
	require.NoError(t, err)
	require.Len(t, er.Rows, 1)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_after' AND payload = $1`, ledger.ErasedPayload))
	rk, err = onlyNew.Rekey(ctx)
	require.NoError(t, err)
	require.Zero(t, rk.Sealed, "erased payloads are left")
}

// TestHoldsMatchesTheSQL: the Go reading of a payload (sealed ones) and
// the statement's agree.
func TestHoldsMatchesTheSQL(t *testing.T) {
	t.Parallel()
	for payload, want := range map[string]bool{
		`{"a":"cus_1"}`:                  true,
		`{"a":"cus_12"}`:                 false,
		`{"a":["x",{"b":"cus_\u0031"}]}`: true,
		`{"cus_1":1}`:                    true,
		`{"a":1}`:                        false,
		`user=cus_1&x=y`:                 true,
		`user=cus%401`:                   false,
	} {
		require.Equal(t, want, ledger.Holds([]byte(payload), "cus_1"), payload)
	}
}

// BenchmarkSealOpen: the CPU that PAYLOAD_KEYS adds per event, sealing at
// the claim and opening at a read, on a real Stripe payload.
func BenchmarkSealOpen(b *testing.B) {
	payload, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Skip(err)
	}
	s, err := ledger.NewSealer([][]byte{bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	k := ledger.EventKey{Namespace: "stripe", EventID: "evt_1"}
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := s.Open(k, s.Seal(k, payload)); err != nil {
			b.Fatal(err)
		}
	}
}
