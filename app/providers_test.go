package app_test

import (
	"bytes"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

var providerSecrets = map[string]string{
	"stripe":   "whsec_stripe_http",
	"github":   "github secret",
	"shopify":  "shopify_secret",
	"paddle":   "pdl_ntfset_secret",
	"slack":    "slack_signing_secret",
	"standard": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
}

func allProviders(t *testing.T) *server {
	return start(t, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   providerSecrets["stripe"],
		"GITHUB_WEBHOOK_SECRET":   "old github secret," + providerSecrets["github"],
		"SHOPIFY_WEBHOOK_SECRET":  providerSecrets["shopify"],
		"PADDLE_WEBHOOK_SECRET":   providerSecrets["paddle"],
		"SLACK_SIGNING_SECRET":    providerSecrets["slack"],
		"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"],
	})
}

// TestEveryProviderOverHTTP posts each provider's example payload, signed
// the documented way: claimed, then duplicate; then 401 for a tampered
// body, a wrong secret, a stale timestamp and a missing header.
func TestEveryProviderOverHTTP(t *testing.T) {
	t.Parallel()
	s := allProviders(t)
	examples := []struct {
		provider, file, id, typ string
	}{
		{"stripe", "stripe/customer.subscription.created.json", "evt_composed_sub_created_0001", "customer.subscription.created"},
		{"github", "github/push.default.json", "0a3e6a2c-0000-4000-8000-000000000001", "push"},
		{"shopify", "shopify/products.update.shopify-dev-example.json", "98880550-7158-44d4-b7cd-2c97c8a091b5", "products/update"},
		{"paddle", "paddle/subscription.created.evt_01hv9771tccgcm4y810d8zbceh.json", "evt_01hv9771tccgcm4y810d8zbceh", "subscription.created"},
		{"slack", "slack/event_callback.app_mention.json", "Ev111", "app_mention"},
		{"standard", "standard-webhooks/contact.created.spec-example.minified.txt", "msg_p5jXN8AQM9LWM0D4loKWxJek", "contact.created"},
	}
	for _, ex := range examples {
		t.Run(ex.provider, func(t *testing.T) {
			p, _ := provider.Lookup(ex.provider)
			body, err := os.ReadFile("../testdata/providers/" + ex.file)
			require.NoError(t, err)
			path := "/webhooks/" + ex.provider
			sign := func(secret string, at time.Time, b []byte) http.Header {
				h, err := p.Sign(secret, provider.Delivery{ID: ex.id, Type: ex.typ, At: at, Body: b})
				require.NoError(t, err)
				return h
			}
			h := sign(providerSecrets[ex.provider], time.Now(), body)

			code, out := s.post(t, path, body, h)
			require.Equal(t, http.StatusOK, code, "%v", out)
			require.Equal(t, map[string]any{"status": "claimed", "event_id": ex.id}, out)
			code, out = s.post(t, path, body, sign(providerSecrets[ex.provider], time.Now(), body))
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "duplicate", out["status"])

			var (
				source, eventType string
				secretIndex       int
			)
			require.NoError(t, s.db.SQL.QueryRow(`SELECT source, event_type, secret_index FROM webhook_event WHERE namespace = $1 AND event_id = $2`, ex.provider, ex.id).
				Scan(&source, &eventType, &secretIndex))
			require.Equal(t, ex.provider, source)
			require.Equal(t, ex.typ, eventType)
			if ex.provider == "github" {
				require.Equal(t, 1, secretIndex, "the rotated-in secret matched")
			}

			tampered := bytes.Replace(body, []byte(`"`), []byte(` "`), 1)
			code, _ = s.post(t, path, tampered, h)
			require.Equal(t, http.StatusUnauthorized, code, "tampered body")
			code, _ = s.post(t, path, body, sign("whsec_d3Jvbmctc2VjcmV0LWtleS1mb3ItdGVzdHM=", time.Now(), body))
			require.Equal(t, http.StatusUnauthorized, code, "wrong secret")
			missing := h.Clone()
			missing.Del(p.SignatureHeaders[0])
			code, _ = s.post(t, path, body, missing)
			require.Equal(t, http.StatusUnauthorized, code, "missing signature header")
			if p.DefaultTolerance > 0 {
				code, _ = s.post(t, path, body, sign(providerSecrets[ex.provider], time.Now().Add(-p.DefaultTolerance-10*time.Second), body))
				require.Equal(t, http.StatusUnauthorized, code, "stale timestamp")
			}
		})
	}
	require.Equal(t, len(examples), s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

func TestProviderSpecificAnswers(t *testing.T) {
	t.Parallel()
	s := allProviders(t)
	now := time.Now()

	challenge, err := os.ReadFile("../testdata/providers/slack/url_verification.json")
	require.NoError(t, err)
	h, _ := provider.Slack.Sign(providerSecrets["slack"], provider.Delivery{At: now, Body: challenge})
	code, out := s.post(t, "/webhooks/slack", challenge, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", out["challenge"])

	noEventID, err := os.ReadFile("../testdata/providers/slack/event_callback.reaction_added.no_event_id.json")
	require.NoError(t, err)
	h, _ = provider.Slack.Sign(providerSecrets["slack"], provider.Delivery{At: now, Body: noEventID})
	code, _ = s.post(t, "/webhooks/slack", noEventID, h)
	require.Equal(t, http.StatusBadRequest, code, "event_callback without event_id")

	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	h, _ = provider.GitHub.Sign(providerSecrets["github"], provider.Delivery{ID: "", Type: "push", Body: push})
	h.Del("X-Github-Delivery")
	code, _ = s.post(t, "/webhooks/github", push, h)
	require.Equal(t, http.StatusBadRequest, code, "GitHub delivery without X-GitHub-Delivery")

	contact := []byte(`{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{}}`)
	h, _ = provider.Standard.Sign(providerSecrets["standard"], provider.Delivery{ID: "msg_1", At: now, Body: contact})
	h.Del("Webhook-Id")
	code, _ = s.post(t, "/webhooks/standard", contact, h)
	require.Equal(t, http.StatusUnauthorized, code, "Standard Webhooks delivery without webhook-id cannot be verified")
	h, _ = provider.Standard.Sign(providerSecrets["standard"], provider.Delivery{ID: "msg_2", At: now.Add(10 * time.Minute), Body: contact})
	code, _ = s.post(t, "/webhooks/standard", contact, h)
	require.Equal(t, http.StatusUnauthorized, code, "future timestamp, both-way tolerance")

	retry, err := os.ReadFile("../testdata/providers/slack/event_callback.app_mention.json")
	require.NoError(t, err)
	h, _ = provider.Slack.Sign(providerSecrets["slack"], provider.Delivery{At: now, Body: retry})
	h.Set("X-Slack-Retry-Num", "1")
	code, _ = s.post(t, "/webhooks/slack", retry, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE headers->>'X-Slack-Retry-Num' = '1'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "only the app_mention is stored")
}

// TestConfigFileSources: two endpoints of one Stripe account share a ledger
// namespace, a second account has its own, and a sender without ids gets
// them from the configured fallback.
func TestConfigFileSources(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: stripe-eu
    provider: stripe
    secrets: [whsec_eu]
    share_namespace: true
  - name: stripe-other
    provider: stripe
    namespace: stripe-other
    secrets: [whsec_other]
  - name: slack-legacy
    provider: slack
    secrets: [legacy_secret]
    id:
      hash_fields: [team_id, event.event_ts, event.type]
`), 0o600))
	s := start(t, map[string]string{"HOOKLEDGER_CONFIG": path})
	body := subEvent("evt_shared", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "claimed", out["status"])

	h, _ := provider.Stripe.Sign("whsec_eu", provider.Delivery{Body: body})
	code, out = s.post(t, "/webhooks/stripe-eu", body, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "duplicate", out["status"], "same namespace: one ledger for both endpoints")

	h, _ = provider.Stripe.Sign("whsec_other", provider.Delivery{Body: body})
	code, out = s.post(t, "/webhooks/stripe-other", body, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "claimed", out["status"], "another namespace has a ledger of its own")

	legacy, err := os.ReadFile("../testdata/providers/slack/event_callback.reaction_added.no_event_id.json")
	require.NoError(t, err)
	for _, want := range []string{"claimed", "duplicate"} {
		h, _ = provider.Slack.Sign("legacy_secret", provider.Delivery{Body: legacy})
		code, out = s.post(t, "/webhooks/slack-legacy", legacy, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.Equal(t, want, out["status"], "a retry hashes to the same fallback id")
		require.Contains(t, out["event_id"], "sha256:")
	}

	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'stripe' AND source = 'stripe'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'stripe-other' AND source = 'stripe-other'`))
}

func standardSigned(t *testing.T, id string, body []byte) http.Header {
	t.Helper()
	h, err := provider.Standard.Sign(providerSecrets["standard"], provider.Delivery{ID: id, Body: body})
	require.NoError(t, err)
	return h
}

// TestStandardDeliveryWithoutType: a signed Standard Webhooks delivery whose
// body has no type (a sender that publishes its data verbatim) is claimed,
// never refused: its type is the webhook-topic header's, else empty.
func TestStandardDeliveryWithoutType(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"]})
	body := []byte(`{"order_id":"ord_1042","total":4200,"currency":"EUR"}`)
	for id, topic := range map[string]string{"msg_topic": "order.created", "msg_bare": ""} {
		h := standardSigned(t, id, body)
		if topic != "" {
			h.Set("Webhook-Topic", topic)
		}
		code, out := s.post(t, "/webhooks/standard", body, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.Equal(t, "claimed", out["status"])
		s.waitSettled(t, id)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND event_type = $2 AND handlers = '[]'`, id, topic),
			"%s settled as %q, no handler matching it", id, topic)
	}
}
