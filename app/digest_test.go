package app_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestBodyDigestKeepsEventNamesApart: GitHub signs the body only and sends
// the event name unsigned, so a signed body is one event whatever name it
// comes under: the same push body under a new GUID is the replay, as push,
// PUSH or ping alike, and GitHub's redelivery is a duplicate. A GitHub
// App's one body under installation and integration_installation is two
// events, the one pair GitHub documents.
func TestBodyDigestKeepsEventNamesApart(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"GITHUB_WEBHOOK_SECRET": providerSecrets["github"]})
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	post := func(body []byte, guid, event string) string {
		t.Helper()
		h := http.Header{
			"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], body)},
			"X-Github-Delivery":   {guid}, "X-Github-Event": {event},
		}
		code, out := s.post(t, "/webhooks/github", body, h)
		require.Equal(t, http.StatusOK, code, "%s %s: %v", guid, event, out)
		return out["status"].(string)
	}
	require.Equal(t, "claimed", post(push, "guid-push", "push"))
	require.Equal(t, "duplicate", post(push, "guid-replay", "push"), "the same body and event name under a new GUID is the replay")
	require.Equal(t, "duplicate", post(push, "guid-replay-case", "PUSH"), "an event name's case variant is the same event")
	require.Equal(t, "duplicate", post(push, "guid-replay-ping", "ping"), "the same body under another event name is the replay")
	require.Equal(t, "duplicate", post(push, "guid-push", "push"), "GitHub's redelivery")
	s.waitSettled(t, "guid-push")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'guid-push' AND event_type = 'push'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM github_branch`), "the genuine push applied")

	installation, err := os.ReadFile("../testdata/corpus/github/installation.created.json")
	require.NoError(t, err)
	require.Equal(t, "claimed", post(installation, "guid-installation", "installation"))
	require.Equal(t, "claimed", post(installation, "guid-integration-installation", "integration_installation"))
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'github'`))
	require.Equal(t, 3, s.db.Count(t, `SELECT count(DISTINCT body_digest) FROM webhook_event WHERE namespace = 'github'`))

	h := http.Header{
		"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)},
		"X-Github-Delivery":   {"guid-odd-name"}, "X-Github-Event": {"push.created"},
	}
	code, _ := s.post(t, "/webhooks/github", push, h)
	require.Equal(t, http.StatusBadRequest, code, "an event name of another shape")
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestBodyDigestNormalisesShopifyTopics: a Shopify topic's case variants
// are one event, so a captured orders/create re-sent as ORDERS/CREATE
// under a new id is the replay; an order's body under orders/paid is
// another event (Shopify sends an order created paid to both); the type is
// recorded lower-cased, and a topic of another shape, or one Shopify never
// sends an order under, is a 400 that writes nothing.
func TestBodyDigestNormalisesShopifyTopics(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"]})
	body := []byte(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","email":"jon@example.com","total_price":"10.00"}`)
	post := func(id, topic string) (int, map[string]any) {
		t.Helper()
		return s.post(t, "/webhooks/shopify", body, http.Header{
			"X-Shopify-Hmac-Sha256": {provider.SignShopify(providerSecrets["shopify"], body)},
			"X-Shopify-Event-Id":    {id}, "X-Shopify-Topic": {topic},
		})
	}
	for _, c := range []struct{ id, topic, status string }{
		{"ev-create", "orders/create", "claimed"},
		{"ev-upper", "ORDERS/CREATE", "duplicate"},
		{"ev-mixed", "Orders/create", "duplicate"},
		{"ev-paid", "orders/paid", "claimed"},
	} {
		code, out := post(c.id, c.topic)
		require.Equal(t, http.StatusOK, code, "%s: %v", c.topic, out)
		require.Equal(t, c.status, out["status"], c.topic)
	}
	for _, topic := range []string{"orders//create", "orders", "orders/create/../x", "orders:create", "orders/cr\u00e9ate", "orders/x1", "products/create", "carts/update"} {
		code, out := post("ev-bad", topic)
		require.Equal(t, http.StatusBadRequest, code, "%q: %v", topic, out)
	}
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'shopify'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'ev-create' AND event_type = 'orders/create'`))
}

// TestCapturedBodyUnderMadeUpNames: a captured GitHub or Shopify delivery
// re-sent under new ids and event names or topics its provider would never
// send with that body adds no row; the pairs the providers document as one
// body under two names (GitHub's installation and
// integration_installation, Shopify's products/create and products/update)
// are still two events each.
func TestCapturedBodyUnderMadeUpNames(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{
		"GITHUB_WEBHOOK_SECRET":  providerSecrets["github"],
		"SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
	})
	github := func(body []byte, guid, event string) string {
		t.Helper()
		code, out := s.post(t, "/webhooks/github", body, http.Header{
			"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], body)},
			"X-Github-Delivery":   {guid}, "X-Github-Event": {event},
		})
		require.Equal(t, http.StatusOK, code, "%s %s: %v", guid, event, out)
		return out["status"].(string)
	}
	shopify := func(body []byte, id, topic string) (int, string) {
		t.Helper()
		code, out := s.post(t, "/webhooks/shopify", body, http.Header{
			"X-Shopify-Hmac-Sha256": {provider.SignShopify(providerSecrets["shopify"], body)},
			"X-Shopify-Event-Id":    {id}, "X-Shopify-Topic": {topic},
		})
		status, _ := out["status"].(string)
		return code, status
	}

	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	require.Equal(t, "claimed", github(push, "guid-push", "push"))
	for i, event := range []string{"push1", "push2", "a", "issues", "zz_top", "ping", "installation", "integration_installation"} {
		require.Equal(t, "duplicate", github(push, fmt.Sprintf("guid-forged-%d", i), event), "the push body as %s", event)
	}

	installation, err := os.ReadFile("../testdata/corpus/github/installation.created.json")
	require.NoError(t, err)
	require.Equal(t, "claimed", github(installation, "guid-installation", "installation"))
	require.Equal(t, "claimed", github(installation, "guid-integration-installation", "integration_installation"),
		"GitHub sends one installation body under both names")
	for i, event := range []string{"push", "installation_repositories", "integration_installation_repositories", "zz_top"} {
		require.Equal(t, "duplicate", github(installation, fmt.Sprintf("guid-installation-forged-%d", i), event), "the installation body as %s", event)
	}
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'github'`))

	// A product's body: Shopify sends it under products/create and
	// products/update, and under no other topic.
	product, err := os.ReadFile("../testdata/providers/shopify/products.update.shopify-dev-example.json")
	require.NoError(t, err)
	claimed := func(body []byte, id, topic string) string {
		t.Helper()
		code, status := shopify(body, id, topic)
		require.Equal(t, http.StatusOK, code, "%s %s", id, topic)
		return status
	}
	require.Equal(t, "claimed", claimed(product, "ev-product-update", "products/update"))
	require.Equal(t, "claimed", claimed(product, "ev-product-create", "products/create"),
		"Shopify sends one payload to products/create and products/update when a product is created and published")
	for i, topic := range []string{"orders/x1", "zz/yy", "a/b", "products/x", "orders/create", "customers/update", "carts/update"} {
		code, status := shopify(product, fmt.Sprintf("ev-forged-%d", i), topic)
		require.Equal(t, http.StatusBadRequest, code, "the product body as %s: %s", topic, status)
	}

	// A body of no shape hookledger knows is one event under any topic.
	refund, err := os.ReadFile("../testdata/corpus/shopify/refunds.create.refund.json")
	require.NoError(t, err)
	require.Equal(t, "claimed", claimed(refund, "ev-refund", "refunds/create"))
	for i, topic := range []string{"orders/x1", "zz/yy", "a/b", "refunds/update", "orders/create"} {
		require.Equal(t, "duplicate", claimed(refund, fmt.Sprintf("ev-refund-forged-%d", i), topic), "the refund body as %s", topic)
	}
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'shopify'`))
}
