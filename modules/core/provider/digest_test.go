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
// products/update) and GitHub's App installation pair (one body as
// installation and integration_installation) are included; the topic and
// the event name keep the pairs apart.
func TestBodyDigestTradeOff(t *testing.T) {
	t.Parallel()
	events := genuineBodySigned(t)
	product := readFixture(t, "shopify/products.update.shopify-dev-example.json")
	installation, err := os.ReadFile("../../../testdata/corpus/github/installation.created.json")
	require.NoError(t, err)
	events = append(events, genuineEvent{
		name: "products/create of the same product", provider: Shopify,
		header: http.Header{"X-Shopify-Topic": {"products/create"}}, body: product,
	}, genuineEvent{
		name: "installation", provider: GitHub,
		header: http.Header{"X-Github-Event": {"installation"}}, body: installation,
	}, genuineEvent{
		name: "integration_installation of the same installation", provider: GitHub,
		header: http.Header{"X-Github-Event": {"integration_installation"}}, body: installation,
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
	require.Len(t, events, 11, "the body-signed vectors of testdata, the create/update pair and the installation pair")
	require.Zero(t, shared, "no genuine event would be refused as a replay")
	require.Len(t, bodies, len(events)-2, "bodies alone do collide (Shopify's create/update pair, GitHub's installation pair): the topic and the event name are needed")

	h := http.Header{"X-Shopify-Topic": {"products/update"}}
	require.Equal(t, Shopify.DigestFunc(h, product), Shopify.DigestFunc(h, product), "a re-sent body under its topic is the replay")
	push := http.Header{"X-Github-Event": {"push"}}
	require.Equal(t, GitHub.DigestFunc(push, product), GitHub.DigestFunc(push, product), "a re-sent body under its event name is the replay")
}

// TestGitHubDigestHoldsTheEventName: the event name is unsigned, so a
// signed body is one event under any name (a captured push re-sent as ping,
// issues or a made-up name is the replay), except for the names GitHub
// sends one body under: an App's installation body as installation and as
// integration_installation is two events, and only a body of that shape.
// An event name of another shape is a payload error, and the type is
// recorded lower-cased.
func TestGitHubDigestHoldsTheEventName(t *testing.T) {
	t.Parallel()
	body := readFixture(t, "github/push.default.json")
	digest := func(event string, body []byte) string {
		return GitHub.DigestFunc(http.Header{"X-Github-Event": {event}}, body)
	}
	for _, event := range []string{"ping", "issues", "push1", "zz_top", "", "installation", "integration_installation", "integration_installation_repositories"} {
		require.Equal(t, digest("push", body), digest(event, body), "the push body as %q", event)
	}
	installation, err := os.ReadFile("../../../testdata/corpus/github/installation.created.json")
	require.NoError(t, err)
	require.NotEqual(t, digest("installation", installation), digest("integration_installation", installation), "GitHub's App pair is two events")
	for _, event := range []string{"push", "installation_repositories", "integration_installation_repositories", "zz_top"} {
		require.Equal(t, digest("installation", installation), digest(event, installation), "the installation body as %q", event)
	}
	added, err := os.ReadFile("../../../testdata/corpus/github/installation_repositories.added.json")
	require.NoError(t, err)
	require.NotEqual(t, digest("installation_repositories", added), digest("integration_installation_repositories", added))
	require.Equal(t, digest("installation_repositories", added), digest("integration_installation", added))
	for _, variant := range []string{"push", "Push", "PUSH", "pUsH"} {
		ev, err := GitHub.Parse(http.Header{"X-Github-Delivery": {"d-1"}, "X-Github-Event": {variant}}, body, nil)
		require.NoError(t, err, variant)
		require.Equal(t, "push", ev.Type, variant)
	}
	for _, event := range []string{"push ", " push", "push.opened", "push/x", "pu-sh", "pusħ", "push​", "püsh"} {
		_, err := GitHub.Parse(http.Header{"X-Github-Delivery": {"d-1"}, "X-Github-Event": {event}}, body, nil)
		require.ErrorIs(t, err, ErrPayload, "%q", event)
	}
}

// TestShopifyTopicIsNormalised: a topic's case variants are one event,
// in the digest and the recorded type; a topic that is not resource and
// action of letters, digits and _ is a payload error, before any claim.
func TestShopifyTopicIsNormalised(t *testing.T) {
	t.Parallel()
	product := readFixture(t, "shopify/products.update.shopify-dev-example.json")
	body := []byte(`{"id":820982911946154508,"total_price":"10.00"}`)
	digest := func(topic string) string { return Shopify.DigestFunc(http.Header{"X-Shopify-Topic": {topic}}, body) }
	for _, variant := range []string{"orders/create", "Orders/create", "ORDERS/CREATE", "orders/Create"} {
		require.Equal(t, digest("orders/create"), digest(variant), variant)
		for _, name := range []string{"X-Shopify-Topic", "Shopify-Topic"} {
			ev, err := Shopify.Parse(http.Header{"X-Shopify-Event-Id": {"e-1"}, name: {variant}}, body, nil)
			require.NoError(t, err, variant)
			require.Equal(t, "orders/create", ev.Type, variant)
		}
	}
	productDigest := func(topic string) string {
		return Shopify.DigestFunc(http.Header{"X-Shopify-Topic": {topic}}, product)
	}
	require.NotEqual(t, productDigest("products/create"), productDigest("products/update"), "Shopify's create/update pair stays two events")
	require.Equal(t, digest("orders/create"), digest("zz/yy"), "a body of no known kind is one event under any topic")
	for _, topic := range []string{"orders/create", "zz/yy", "products/x", "customers/update"} {
		_, err := Shopify.Parse(http.Header{"X-Shopify-Event-Id": {"e-1"}, "X-Shopify-Topic": {topic}}, product, nil)
		require.ErrorIs(t, err, ErrPayload, "a product body as %s", topic)
	}
	for _, topic := range []string{"customer.tags_added", "customers/data_request", "app/uninstalled", "app_subscriptions/update"} {
		ev, err := Shopify.Parse(http.Header{"X-Shopify-Event-Id": {"e-1"}, "X-Shopify-Topic": {topic}}, body, nil)
		require.NoError(t, err, topic)
		require.Equal(t, topic, ev.Type)
	}
	for _, topic := range []string{"orders", "orders/", "/orders/create", "orders//create", "orders/create/", "orders/create ",
		" orders/create", "orders/cre ate", "orders\\create", "../orders/create", "orders/créate", "orders/create​", "orders-create", "orders:create"} {
		_, err := Shopify.Parse(http.Header{"X-Shopify-Event-Id": {"e-1"}, "X-Shopify-Topic": {topic}}, body, nil)
		require.ErrorIs(t, err, ErrPayload, "%q", topic)
	}
}
