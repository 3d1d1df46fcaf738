package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestFailuresAskOnATerminal: a group action says how many events it
// touches and asks on a terminal; "n" changes nothing (exit 1), "y"
// discards every event of the group.
func TestFailuresAskOnATerminal(t *testing.T) {
	db := dbtest.New(t)
	_, err := db.SQL.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, last_error)
		SELECT 'stripe', 'evt_ask_' || g, 'stripe', 'stripe', 'invoice.paid', '{}', 'failed', 1, 'invoice.applyStripe: customer cus_' || g || ' is gone'
		FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", db.URL)
	ctx := context.Background()
	var out, errOut bytes.Buffer
	require.Equal(t, ExitOK, run(ctx, []string{"failures", "--json"}, terminal{out: &out, errOut: &errOut}), errOut.String())
	var groups []struct {
		ID    string `json:"id"`
		Count int    `json:"count"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &groups))
	require.Len(t, groups, 1)
	require.Equal(t, 3, groups[0].Count)

	for _, step := range []struct {
		answer string
		want   int
	}{{"n\n", 3}, {"y\n", 0}} {
		answer, want := step.answer, step.want
		out.Reset()
		errOut.Reset()
		term := terminal{in: strings.NewReader(answer), out: &out, errOut: &errOut, interactive: true}
		code := run(ctx, []string{"failures", "discard", groups[0].ID, "--reason", "customers deleted"}, term)
		require.Contains(t, out.String(), "group "+groups[0].ID+": 3 failed event(s) from stripe in invoice.applyStripe: customer <id> is gone")
		require.Contains(t, errOut.String(), "This will discard 3 failed event(s). Continue? [y/N]")
		require.Equal(t, want, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`), "answer %q", answer)
		if want > 0 {
			require.Equal(t, ExitFailure, code)
		} else {
			require.Equal(t, ExitOK, code, errOut.String())
			require.Contains(t, out.String(), "3 discarded")
		}
	}
}
