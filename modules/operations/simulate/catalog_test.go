package simulate

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestPayloadsAreTheTestdataOnes: the embedded payloads are the real ones
// in testdata/providers, unchanged.
func TestPayloadsAreTheTestdataOnes(t *testing.T) {
	t.Parallel()
	for src, copy := range payloadFile {
		embedded, err := payloads.ReadFile("payloads/" + copy)
		require.NoError(t, err)
		original, err := os.ReadFile("../../../testdata/providers/" + src)
		require.NoError(t, err)
		if src == "paddle/events-list-response.GET_events.json" {
			var list struct {
				Data []json.RawMessage `json:"data"`
			}
			require.NoError(t, json.Unmarshal(original, &list))
			found := false
			for _, e := range list.Data {
				var head struct {
					Type string `json:"event_type"`
				}
				require.NoError(t, json.Unmarshal(e, &head))
				if head.Type == "transaction.completed" {
					require.JSONEq(t, string(e), string(embedded), src)
					found = true
				}
			}
			require.True(t, found)
			continue
		}
		require.Equal(t, string(original), string(embedded), src)
	}
	for _, tpl := range templates {
		require.Contains(t, payloadFile, tpl.File, tpl.Type)
	}
}

// TestBuildFreshEvents: every template builds a delivery its provider
// parses as the template's type, with a fresh id each time.
func TestBuildFreshEvents(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, tpl := range Templates() {
		p, ok := provider.Lookup(tpl.Provider)
		require.True(t, ok)
		a, err := tpl.Build("", now)
		require.NoError(t, err)
		b, err := tpl.Build("", now)
		require.NoError(t, err)
		require.NotEqual(t, a.ID, b.ID, tpl.Type)
		h, err := p.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", a)
		require.NoError(t, err)
		ev, err := p.ParseFunc(h, a.Body)
		require.NoError(t, err, tpl.Type)
		require.Equal(t, a.ID, ev.ID, tpl.Type)
		require.Equal(t, tpl.Type, ev.Type)
	}
	tpl, ok := LookupTemplate("customer.subscription.updated")
	require.True(t, ok)
	d, err := tpl.Build("sub_kept", now)
	require.NoError(t, err)
	var body struct {
		Created int64 `json:"created"`
		Data    struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, "sub_kept", body.Data.Object.ID)
	require.Equal(t, now.Unix(), body.Created)
}
