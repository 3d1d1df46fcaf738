package provider

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// genuineEvent is one real delivery of a body-signing provider.
type genuineEvent struct {
	name     string
	provider *Provider
	header   http.Header
	body     []byte
}

// genuineBodySigned gathers every genuine GitHub and Shopify delivery in
// testdata: the payload files (the header the file name gives) and the
// valid signature vectors.
func genuineBodySigned(t *testing.T) []genuineEvent {
	var out []genuineEvent
	for _, p := range []*Provider{GitHub, Shopify} {
		files, err := filepath.Glob("../../../testdata/providers/" + p.Name + "/*.json")
		require.NoError(t, err)
		for _, f := range files {
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			event, _, _ := strings.Cut(filepath.Base(f), ".")
			h := http.Header{}
			if p == Shopify {
				// products.update.shopify-dev-example.json is topic products/update.
				parts := strings.SplitN(filepath.Base(f), ".", 3)
				h.Set("X-Shopify-Topic", parts[0]+"/"+parts[1])
			} else {
				h.Set("X-Github-Event", event)
			}
			out = append(out, genuineEvent{name: filepath.Base(f), provider: p, header: h, body: body})
		}
	}
	for _, v := range loadVectors(t) {
		p, ok := Lookup(v.Provider)
		if !ok || p.DigestFunc == nil || v.Expect != "valid" {
			continue
		}
		body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
		require.NoError(t, err)
		h := http.Header{}
		for k, val := range v.Headers {
			h.Set(k, val)
		}
		out = append(out, genuineEvent{name: v.Description, provider: p, header: h, body: body})
	}
	return out
}

// TestBodyDigestTradeOff measures the cost of treating a repeated signed
// body as a replay: how many distinct genuine events in testdata share a
// digest (each would be answered duplicate and never applied). Shopify's
// documented create+publish case (one payload to products/create and
// products/update) is included; the topic keeps the pair apart.
func TestBodyDigestTradeOff(t *testing.T) {
	t.Parallel()
	events := genuineBodySigned(t)
	product := readFixture(t, "shopify/products.update.shopify-dev-example.json")
	events = append(events, genuineEvent{
		name: "products/create of the same product", provider: Shopify,
		header: http.Header{"X-Shopify-Topic": {"products/create"}}, body: product,
	})
	seen := map[string]string{}
	bodies := map[string]bool{}
	shared := 0
	for _, e := range events {
		d := e.provider.DigestFunc(e.header, e.body)
		if first, dup := seen[d]; dup {
			shared++
			t.Logf("%s shares its digest with %s", e.name, first)
		}
		seen[d] = e.name
		bodies[string(e.body)] = true
	}
	t.Logf("%d genuine GitHub/Shopify events, %d distinct bodies, %d share a digest", len(events), len(bodies), shared)
	require.Len(t, events, 9, "the body-signed vectors of testdata and the create/update pair")
	require.Zero(t, shared, "no genuine event would be refused as a replay")
	require.Len(t, bodies, len(events)-1, "bodies alone do collide (Shopify's create/update pair): the topic is needed")

	h := http.Header{"X-Shopify-Topic": {"products/update"}}
	require.Equal(t, Shopify.DigestFunc(h, product), Shopify.DigestFunc(h, product), "a re-sent body under its topic is the replay")
	require.Equal(t, GitHub.DigestFunc(http.Header{"X-Github-Event": {"push"}}, product), GitHub.DigestFunc(http.Header{"X-Github-Event": {"issues"}}, product),
		"GitHub's event name is not signed: it cannot tell two events apart")
}
