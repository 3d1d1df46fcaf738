package ledger_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// unknownKeyID is a key id that no key of these tests has.
const unknownKeyID = "deadbeef"

// sealedUnder returns stored, a payload sealed as sealed:v1:<id>:..., with
// its key id replaced by id: a payload of a key PAYLOAD_KEYS lacks (a
// restored backup, a key removed too early).
func sealedUnder(t *testing.T, stored []byte, id string) []byte {
	t.Helper()
	old, ok := ledger.Sealed(stored)
	require.True(t, ok, "sealed")
	return bytes.Replace(stored, []byte(":"+old+":"), []byte(":"+id+":"), 1)
}

// corrupted returns a sealed payload with its ciphertext altered: its key
// is configured, but it does not open.
func corrupted(t *testing.T, stored []byte) []byte {
	t.Helper()
	out := bytes.Clone(stored)
	i := len(out) - 5
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

// unreadableOf writes each unreadable payload as "namespace/event_id key
// reason".
func unreadableOf(us []ledger.UnreadablePayload) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Namespace + "/" + u.EventID + " " + u.KeyID + " " + u.Reason
	}
	return out
}

// TestUnreadablePayloadsSkipped: one stored payload sealed under a key id
// no configured key has, and one under a configured key whose ciphertext
// was altered, no longer stop the ledger: the start-up check passes while
// most of the newest payloads open (and counts the unknown key's rows),
// CheckPayloads lists both with their key ids, Erase erases the rest and
// reports both as skipped (and which of them quote the subject where it
// can still read), and Rekey seals the rest and reports both.
func TestUnreadablePayloadsSkipped(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	store := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, k1)})
	for _, id := range []string{"evt_a", "evt_b", "evt_c", "evt_d"} {
		_, err := store.Claim(ctx, claimOf(id, "invoice.paid"))
		require.NoError(t, err)
	}
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled'`)
	require.NoError(t, err)
	stored := func(id string) []byte {
		var p []byte
		require.NoError(t, h.DB.SQL.QueryRow(`SELECT payload FROM webhook_event WHERE event_id = $1`, id).Scan(&p))
		return p
	}
	write := func(id string, p []byte) {
		_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET payload = $2 WHERE event_id = $1`, id, string(p))
		require.NoError(t, err)
	}
	write("evt_b", sealedUnder(t, stored("evt_b"), unknownKeyID))
	write("evt_c", corrupted(t, stored("evt_c")))

	// Start-up: three of the four newest payloads name a configured key.
	found, err := ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, k1))
	require.NoError(t, err)
	require.Equal(t, 4, found.Sealed)
	require.Equal(t, map[string]int{unknownKeyID: 1}, found.Unknown)
	require.Equal(t, 1, found.Unreadable())

	check, err := store.CheckSealed(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), check.Checked)
	require.Equal(t, int64(4), check.Sealed)
	require.Equal(t, []string{
		"stripe/evt_b " + unknownKeyID + " " + ledger.UnreadableUnknownKey,
		"stripe/evt_c " + ledger.KeyID(k1) + " " + ledger.UnreadableCorrupt,
	}, unreadableOf(check.Unreadable))
	require.Equal(t, map[string]int{unknownKeyID: 1, ledger.KeyID(k1): 1}, check.UnreadableByKey())

	// Erase reads past them, erases the subject's row and names them.
	er, err := store.Erase(ctx, "evt_a", "", false)
	require.NoError(t, err)
	require.Len(t, er.Rows, 1)
	require.Equal(t, "evt_a", er.Rows[0].EventID)
	require.Equal(t, unreadableOf(check.Unreadable), unreadableOf(er.Unreadable))
	require.Empty(t, er.Quoting, "nothing readable of the skipped rows quotes evt_a")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_a' AND payload = $1`, ledger.ErasedPayload))
	// A subject quoted by what is still readable of a skipped row (its
	// last error) may well be in its payload.
	_, err = h.DB.SQL.Exec(`UPDATE webhook_event SET last_error = 'handler invoice: customer cus_b refused' WHERE event_id = 'evt_b'`)
	require.NoError(t, err)
	er, err = store.Erase(ctx, "cus_b", "", true)
	require.NoError(t, err)
	require.Empty(t, er.Rows)
	require.Equal(t, []ledger.EventKey{{Namespace: "stripe", EventID: "evt_b"}}, er.Quoting)
	// Out of the namespace, nothing is skipped.
	er, err = store.Erase(ctx, "evt_d", "other", false)
	require.NoError(t, err)
	require.Empty(t, er.Rows)
	require.Empty(t, er.Unreadable)

	// Rekey under k2 seals evt_d (evt_a is erased) and reports the two.
	rotated := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, k2, k1)})
	rk, err := rotated.Rekey(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), rk.Sealed)
	require.Equal(t, unreadableOf(check.Unreadable), unreadableOf(rk.Unreadable))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_d' AND payload LIKE 'sealed:v1:'||$1||':%'`, ledger.KeyID(k2)))
	require.Equal(t, string(sealedUnder(t, stored("evt_b"), unknownKeyID)), string(stored("evt_b")), "left as it was")
}

// TestCheckSealerRefusesPlainlyWrongKeys: start-up refuses when most of
// the newest sealed payloads name a key it lacks (the keys are wrong, or
// PAYLOAD_KEYS is unset), and not for a few such rows among payloads it
// opens.
func TestCheckSealerRefusesPlainlyWrongKeys(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	store := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, k1)})
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		_, err := store.Claim(ctx, claimOf(id, "invoice.paid"))
		require.NoError(t, err)
	}
	_, err := ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, k2))
	require.ErrorContains(t, err, "PAYLOAD_KEYS cannot open stored payloads")
	require.ErrorContains(t, err, ledger.KeyID(k1), "names the key id the payloads need")
	_, err = ledger.CheckSealer(ctx, h.DB.SQL, nil)
	require.ErrorContains(t, err, "PAYLOAD_KEYS is not set")
	found, err := ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, k2, k1))
	require.NoError(t, err)
	require.Zero(t, found.Unreadable())

	// Two of three under an unknown key: most of the newest do not open.
	_, err = h.DB.SQL.Exec(`UPDATE webhook_event SET payload = 'sealed:v1:` + unknownKeyID + `:' || substring(payload FROM 20) WHERE event_id IN ('evt_2', 'evt_3')`)
	require.NoError(t, err)
	_, err = ledger.CheckSealer(ctx, h.DB.SQL, sealerOf(t, k1))
	require.ErrorContains(t, err, unknownKeyID)
}

// TestUnreadablePayloadApplyFails: the apply of an event whose payload no
// key opens fails with the reason, naming the key: an unknown key id, or
// a configured key that does not open an altered payload.
func TestUnreadablePayloadApplyFails(t *testing.T) {
	t.Parallel()
	k1 := bytes.Repeat([]byte{1}, 32)
	sealer := sealerOf(t, k1)
	h := ledgertest.NewWith(t, ledger.RiverOptions{Workers: 2, Sealer: sealer}, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
	})
	seal := func(id string) []byte {
		return sealer.Seal(ledger.EventKey{Namespace: "stripe", EventID: id}, claimOf(id, "invoice.paid").Payload)
	}
	h.InsertBatch(t, "stripe",
		ledgertest.BatchEvent{ID: "evt_unknown", Type: "invoice.paid", Payload: sealedUnder(t, seal("evt_unknown"), unknownKeyID)},
		ledgertest.BatchEvent{ID: "evt_altered", Type: "invoice.paid", Payload: corrupted(t, seal("evt_altered"))},
		ledgertest.BatchEvent{ID: "evt_fine", Type: "invoice.paid", Payload: seal("evt_fine")},
	)
	h.WaitSettled(t, "stripe", "evt_fine")
	for id, reason := range map[string]string{
		"evt_unknown": "sealed with key " + unknownKeyID + ": " + ledger.ErrPayloadKey.Error(),
		"evt_altered": "does not open with key " + ledger.KeyID(k1),
	} {
		dbtest.Eventually(t, func() bool {
			return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status <> 'settled' AND strpos(last_error, $2) > 0`, id, reason) == 1
		}, "the apply of "+id+" fails with the reason")
	}
}
