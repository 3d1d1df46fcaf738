package ledger_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestStoredBodiesReadDigests: a duplicate is compared with the digest the
// claim kept (keyed under a payload key, plain without), a row claimed
// without one (before digests were kept) by its body only when that is at
// most LegacyBodyBytes, and an erased row not at all.
func TestStoredBodiesReadDigests(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	identityOf := func(b []byte) []byte { sum := sha256.Sum256(b); return sum[:] }
	small, large := []byte(`{"id":"small"}`), []byte(`{"id":"large","pad":"`+strings.Repeat("x", ledger.LegacyBodyBytes)+`"}`)
	for ns, store := range map[string]*ledger.Store{
		"plain":  ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{}),
		"sealed": ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, bytes.Repeat([]byte{3}, 32))}),
	} {
		claim := func(id string, body []byte, kept bool) {
			c := ledger.Claim{Namespace: ns, EventID: id, Provider: "stripe", Source: ns, Type: "x", Payload: body}
			if kept {
				c.BodyIdentity = identityOf(body)
			}
			_, err := store.Claim(ctx, c)
			require.NoError(t, err)
		}
		claim("kept", small, true)
		claim("legacy_small", small, false)
		claim("legacy_large", large, false)
		key := func(id string) ledger.EventKey { return ledger.EventKey{Namespace: ns, EventID: id} }
		got, err := store.StoredBodies(ctx, []ledger.EventKey{key("kept"), key("legacy_small"), key("legacy_large"), key("absent")})
		require.NoError(t, err)
		require.Len(t, got, 3, ns)
		for id, want := range map[string][2]bool{"kept": {true, true}, "legacy_small": {true, true}, "legacy_large": {false, false}} {
			same, known := got[key(id)].Same(identityOf(small), identityOf)
			if id == "legacy_large" {
				same, known = got[key(id)].Same(identityOf(large), identityOf)
			}
			require.Equal(t, want, [2]bool{same, known}, "%s/%s", ns, id)
		}
		for _, id := range []string{"kept", "legacy_small"} {
			same, known := got[key(id)].Same(identityOf([]byte(`{"id":"other"}`)), identityOf)
			require.Equal(t, [2]bool{false, true}, [2]bool{same, known}, "%s/%s: another body", ns, id)
		}
		var stored string
		require.NoError(t, h.DB.SQL.QueryRow(`SELECT body_identity FROM webhook_event WHERE namespace = $1 AND event_id = 'kept'`, ns).Scan(&stored))
		if ns == "sealed" {
			require.NotContains(t, stored, "sha256:", "keyed under the payload key")
		} else {
			require.True(t, strings.HasPrefix(stored, "sha256:"), stored)
		}
	}
}
