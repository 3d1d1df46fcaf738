package app_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestBodyDigestKeepsEventNamesApart: GitHub signs the body only, so the
// event name is part of what makes a replay. One signed push body posted
// first as ping under its own GUID does not make the genuine push a
// duplicate: both are claimed, and the push is applied. The same body as
// push under a third GUID (or as PUSH under a fourth) is the replay. A
// GitHub App's one body under installation and integration_installation
// is two events.
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
	require.Equal(t, "claimed", post(push, "guid-ping", "ping"), "the body under the wrong event name")
	require.Equal(t, "claimed", post(push, "guid-push", "push"), "the genuine push is not answered duplicate")
	require.Equal(t, "duplicate", post(push, "guid-replay", "push"), "the same body and event name under a new GUID is the replay")
	require.Equal(t, "duplicate", post(push, "guid-replay-case", "PUSH"), "an event name's case variant is the same event")
	require.Equal(t, "duplicate", post(push, "guid-push", "push"), "GitHub's redelivery")
	s.waitSettled(t, "guid-push")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'guid-push' AND event_type = 'push'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM github_branch`), "the genuine push applied")

	installation, err := os.ReadFile("../testdata/corpus/github/installation.created.json")
	require.NoError(t, err)
	require.Equal(t, "claimed", post(installation, "guid-installation", "installation"))
	require.Equal(t, "claimed", post(installation, "guid-integration-installation", "integration_installation"))
	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'github'`))
	require.Equal(t, 4, s.db.Count(t, `SELECT count(DISTINCT body_digest) FROM webhook_event WHERE namespace = 'github'`))

	h := http.Header{
		"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)},
		"X-Github-Delivery":   {"guid-odd-name"}, "X-Github-Event": {"push.created"},
	}
	code, _ := s.post(t, "/webhooks/github", push, h)
	require.Equal(t, http.StatusBadRequest, code, "an event name of another shape")
	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestBodyDigestNormalisesShopifyTopics: a Shopify topic's case variants
// are one event, so a captured orders/create re-sent as ORDERS/CREATE
// under a new id is the replay; the type is recorded lower-cased, and a
// topic of another shape is a 400 that writes nothing.
func TestBodyDigestNormalisesShopifyTopics(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"]})
	body := []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"10.00"}`)
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
	for _, topic := range []string{"orders//create", "orders", "orders/create/../x", "orders:create", "orders/cr\u00e9ate"} {
		code, out := post("ev-bad", topic)
		require.Equal(t, http.StatusBadRequest, code, "%q: %v", topic, out)
	}
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'shopify'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'ev-create' AND event_type = 'orders/create'`))
}
