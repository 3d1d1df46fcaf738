package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestEraseMatchesStringValuesExactly: a payload holds the subject when a
// JSON string anywhere in it (a value or a key) is the subject, escaped or
// not; a longer string does not; a form body holds it as text or
// URL-encoded.
// Rows still to be applied are reported and left.
func TestEraseMatchesStringValuesExactly(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	payloads := map[string]string{
		"evt_plain":   `{"data":{"object":{"customer":"ana@example.com"}}}`,
		"evt_escaped": `{"data":{"list":[{"email":"ana\u0040example.com"}]}}`,
		"evt_key":     `{"ana@example.com":"x"}`,
		"evt_longer":  `{"email":"ana@example.com.evil"}`,
		"evt_form":    `text=hello&user=ana%40example.com`,
		"evt_shadow":  `{"email":"ana@example.com","email":"x"}`,
		"evt_pending": `{"customer":"ana@example.com"}`,
		"evt_empty":   ``,
	}
	for id, p := range payloads {
		h.Claim(t, "stripe", id, "x", []byte(p))
	}
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled' WHERE event_id <> 'evt_pending'`)
	require.NoError(t, err)

	dry, err := h.Claimer.Erase(ctx, "ana@example.com", "", true)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"evt_plain", "evt_escaped", "evt_key", "evt_form", "evt_shadow"}, eraseIDs(dry.Rows))
	require.Equal(t, []string{"evt_pending"}, eraseIDs(dry.Pending))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NOT NULL`))

	other, err := h.Claimer.Erase(ctx, "ana@example.com", "github", false)
	require.NoError(t, err)
	require.Empty(t, other.Rows, "another namespace")

	done, err := h.Claimer.Erase(ctx, "ana@example.com", "stripe", false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"evt_plain", "evt_escaped", "evt_key", "evt_form", "evt_shadow"}, eraseIDs(done.Rows))
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload = $1 AND erased_at IS NOT NULL`, ledger.ErasedPayload))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_pending' AND erased_at IS NULL`))

	_, err = h.Claimer.Erase(ctx, "", "", true)
	require.Error(t, err, "an empty subject matches everything")
}

func eraseIDs(ms []ledger.EraseMatch) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.EventID)
	}
	return ids
}
