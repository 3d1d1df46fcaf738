package simulate

import (
	"encoding/json"
	iofs "io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// modules are two modules' samples: a Stripe object, a Stripe object
// without an id of its own, a Paddle one, a GitHub push, a Standard
// Webhooks record, and a type both modules keep.
var modules = map[string]fstest.MapFS{
	"alpha": {
		"stripe/thing.updated.json": {Data: []byte(`{"id":"evt_x","object":"event","type":"thing.updated","created":1,` +
			`"data":{"object":{"id":"th_1","latest_charge":"ch_1","status":"open"}}}`)},
		"stripe/summary.updated.json": {Data: []byte(`{"id":"evt_y","object":"event","type":"summary.updated","created":1,` +
			`"data":{"object":{"customer":"cus_1","object":"summary"}}}`)},
		"paddle/thing.created.json": {Data: []byte(`{"event_id":"evt_p","event_type":"thing.created","occurred_at":"2024-01-01T00:00:00Z","data":{"id":"thg_1"}}`)},
		"github/push.json":          {Data: []byte(`{"ref":"refs/heads/main","before":"a","after":"b","repository":{"id":1}}`)},
	},
	"beta": {
		"standard/usage.recorded.json": {Data: []byte(`{"type":"usage.recorded","timestamp":"2024-01-01T00:00:00Z","data":{"customer_id":"cus_s","quantity":1}}`)},
		"stripe/thing.updated.json":    {Data: []byte(`{"id":"evt_b","object":"event","type":"thing.updated","created":1,"data":{"object":{"id":"th_b"}}}`)},
	},
}

func testCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := NewCatalog(map[string]iofs.FS{"alpha": modules["alpha"], "beta": modules["beta"]})
	require.NoError(t, err)
	return c
}

// TestCatalogListsEveryModulesSamples: one sample per provider and type,
// the first module's by name when two keep one, with the file it came
// from.
func TestCatalogListsEveryModulesSamples(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	var got []string
	for _, s := range c.Samples() {
		got = append(got, s.Provider+" "+s.Type+" "+s.Module+" "+s.File)
	}
	require.Equal(t, []string{
		"github push alpha modules/features/alpha/samples/github/push.json",
		"paddle thing.created alpha modules/features/alpha/samples/paddle/thing.created.json",
		"standard usage.recorded beta modules/features/beta/samples/standard/usage.recorded.json",
		"stripe summary.updated alpha modules/features/alpha/samples/stripe/summary.updated.json",
		"stripe thing.updated alpha modules/features/alpha/samples/stripe/thing.updated.json",
	}, got)
	require.Equal(t, []string{"summary.updated", "thing.updated"}, c.TypesOf("stripe"))
	_, ok := c.Lookup("nothing.like.it")
	require.False(t, ok)

	_, err := NewCatalog(map[string]iofs.FS{"bad": fstest.MapFS{"nosuch/x.json": {Data: []byte(`{}`)}}})
	require.ErrorContains(t, err, `no provider "nosuch"`)
	_, err = NewCatalog(map[string]iofs.FS{"bad": fstest.MapFS{"stripe/x.json": {Data: []byte(`{`)}}})
	require.ErrorContains(t, err, "not JSON")
}

// TestBuildFreshEvents: every sample builds a delivery its provider
// parses as the sample's type, with a fresh event id and object id each
// time (the id's prefix kept), dated now; --object keeps an object, or
// names the customer of an object without an id.
func TestBuildFreshEvents(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	c := testCatalog(t)
	for _, s := range c.Samples() {
		p, ok := provider.Lookup(s.Provider)
		require.True(t, ok)
		a, err := s.Build("", now)
		require.NoError(t, err)
		b, err := s.Build("", now)
		require.NoError(t, err)
		require.NotEqual(t, a.ID, b.ID, s.Type)
		h, err := p.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", a)
		require.NoError(t, err)
		ev, err := p.ParseFunc(h, a.Body)
		require.NoError(t, err, s.Type)
		require.Equal(t, a.ID, ev.ID, s.Type)
		require.Equal(t, s.Type, ev.Type)
	}
	var body struct {
		Created int64 `json:"created"`
		Data    struct {
			Object map[string]any `json:"object"`
		} `json:"data"`
	}
	s, _ := c.Lookup("thing.updated")
	d, err := s.Build("", now)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, now.Unix(), body.Created)
	require.Regexp(t, `^th_[0-9a-f]{24}$`, body.Data.Object["id"])
	require.Regexp(t, `^ch_[0-9a-f]{24}$`, body.Data.Object["latest_charge"])
	require.Equal(t, "open", body.Data.Object["status"], "the rest of the sample is kept")
	d, err = s.Build("th_kept", now)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, "th_kept", body.Data.Object["id"])

	s, _ = c.Lookup("summary.updated")
	d, err = s.Build("cus_kept", now)
	require.NoError(t, err)
	body.Data.Object = nil
	require.NoError(t, json.Unmarshal(d.Body, &body))
	require.Equal(t, "cus_kept", body.Data.Object["customer"])
	require.NotContains(t, body.Data.Object, "id")
}
