package provider

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// secretsFor returns an old and a new secret in the provider's format.
func secretsFor(p *Provider) (string, string, string) {
	if p == Standard {
		return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_" + "c2Vjb25kLXNlY3JldC1rZXktZm9yLXRlc3Rz", "whsec_" + "d3Jvbmctc2VjcmV0LWtleS1mb3ItdGVzdHM="
	}
	return "secret_old", "secret_new", "secret_wrong"
}

// signatureHeader is the header that carries the signature.
func signatureHeader(p *Provider) string { return p.SignatureHeaders[0] }

// TestEveryProviderVerifies signs a delivery the documented way and checks
// rotation, tampering, wrong secrets, stale and future timestamps and
// missing headers for each provider.
func TestEveryProviderVerifies(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, name := range Names() {
		p, _ := Lookup(name)
		t.Run(name, func(t *testing.T) {
			oldS, newS, wrongS := secretsFor(p)
			secrets := [][]byte{[]byte(oldS), []byte(newS)}
			body := []byte(`{"id":"evt_1","event_id":"evt_1","type":"x.created","event_type":"x.created"}`)
			d := Delivery{ID: "evt_1", Type: "x.created", At: now, Body: body}

			h, err := p.Sign(newS, d)
			require.NoError(t, err)
			v, err := p.Verify(h, body, secrets, now, -1)
			require.NoError(t, err)
			require.Equal(t, 1, v.SecretIndex, "rotation: the second secret matched")

			_, err = p.Verify(h, append([]byte(" "), body...), secrets, now, -1)
			require.ErrorIs(t, err, ErrSignature, "tampered body")

			hw, err := p.Sign(wrongS, d)
			require.NoError(t, err)
			_, err = p.Verify(hw, body, secrets, now, -1)
			require.ErrorIs(t, err, ErrSignature, "wrong secret")

			missing := h.Clone()
			missing.Del(signatureHeader(p))
			_, err = p.Verify(missing, body, secrets, now, -1)
			require.ErrorIs(t, err, ErrSignature, "missing header")

			_, err = p.Verify(h, body, nil, now, -1)
			require.ErrorIs(t, err, ErrSignature, "no secrets never verifies")

			if p.DefaultTolerance == 0 {
				return // GitHub and Shopify sign no timestamp
			}
			_, err = p.Verify(h, body, secrets, now.Add(p.DefaultTolerance+time.Second), -1)
			require.ErrorIs(t, err, ErrSignature, "stale")
			_, err = p.Verify(h, body, secrets, now.Add(p.DefaultTolerance+time.Second), 0)
			require.NoError(t, err, "tolerance 0 turns the check off")
			_, err = p.Verify(h, body, secrets, now.Add(-p.DefaultTolerance-time.Second), -1)
			if name == "slack" || name == "standard" {
				require.ErrorIs(t, err, ErrSignature, "future timestamps rejected both ways")
			} else {
				require.NoError(t, err, "future timestamps pass, as in the provider's SDKs")
			}
		})
	}
}

func readFixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../../testdata/providers/" + path)
	require.NoError(t, err)
	return b
}

func TestParseExamples(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p        *Provider
		file     string
		header   http.Header
		id, typ  string
		occurred time.Time
	}{
		{Stripe, "stripe/customer.subscription.updated.json", nil, "evt_composed_sub_updated_0002", "customer.subscription.updated", time.Unix(1234567960, 0)},
		{GitHub, "github/issues.opened.json", http.Header{"X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"}, "X-Github-Event": {"issues"}}, "72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues.opened", time.Time{}},
		{GitHub, "github/push.default.json", http.Header{"X-Github-Delivery": {"d-1"}, "X-Github-Event": {"push"}}, "d-1", "push", time.Time{}},
		{GitHub, "github/ping.default.json", http.Header{"X-Github-Delivery": {"d-2"}, "X-Github-Event": {"ping"}}, "d-2", "ping", time.Time{}},
		{Shopify, "shopify/products.update.shopify-dev-example.json", http.Header{"X-Shopify-Event-Id": {"e-1"}, "X-Shopify-Webhook-Id": {"w-1"}, "X-Shopify-Topic": {"products/update"}, "X-Shopify-Triggered-At": {"2025-04-22T19:30:00.5Z"}}, "e-1", "products/update", time.Date(2025, 4, 22, 19, 30, 0, 5e8, time.UTC)},
		{Shopify, "shopify/products.update.shopify-dev-example.json", http.Header{"X-Shopify-Webhook-Id": {"w-1"}, "X-Shopify-Topic": {"products/update"}}, "w-1", "products/update", time.Time{}},
		{Paddle, "paddle/subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json", nil, "evt_01hg0trpmmdkkdbk4p8czp4drm", "subscription.updated", time.Date(2023, 11, 24, 14, 12, 1, 813044000, time.UTC)},
		{Slack, "slack/event_callback.app_mention.json", nil, "Ev111", "app_mention", time.Unix(1595926230, 0)},
		{Standard, "standard-webhooks/contact.created.spec-example.json", http.Header{"Webhook-Id": {"msg_1"}}, "msg_1", "contact.created", time.Date(2022, 11, 3, 20, 26, 10, 344522000, time.UTC)},
		{Standard, "standard-webhooks/contact.created.spec-example.json", http.Header{"Svix-Id": {"msg_2"}}, "msg_2", "contact.created", time.Date(2022, 11, 3, 20, 26, 10, 344522000, time.UTC)},
		// The type is not required: from the body, else Webhook-Topic, else empty.
		{Standard, "standard-webhooks/no-type.outpost.json", http.Header{"Webhook-Id": {"msg_3"}, "Webhook-Topic": {"order.created"}}, "msg_3", "order.created", time.Time{}},
		{Standard, "standard-webhooks/no-type.outpost.json", http.Header{"Webhook-Id": {"msg_4"}}, "msg_4", "", time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.p.Name+"/"+c.file, func(t *testing.T) {
			ev, err := c.p.Parse(c.header, readFixture(t, c.file), nil)
			require.NoError(t, err)
			require.Equal(t, c.id, ev.ID)
			require.Equal(t, c.typ, ev.Type)
			require.True(t, c.occurred.Equal(ev.OccurredAt), "occurred %v, want %v", ev.OccurredAt, c.occurred)
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		p      *Provider
		header http.Header
		body   string
	}{
		{GitHub, http.Header{"X-Github-Event": {"push"}}, `{}`},
		{GitHub, http.Header{"X-Github-Delivery": {"d"}}, `{}`},
		{GitHub, http.Header{"X-Github-Delivery": {"d"}, "X-Github-Event": {"push"}}, `payload=%7B%7D`},
		{Shopify, http.Header{"X-Shopify-Topic": {"orders/create"}}, `{}`},
		{Shopify, http.Header{"X-Shopify-Event-Id": {"e"}}, `{}`},
		{Paddle, nil, `{"event_type":"x"}`},
		{Slack, nil, string(readFixture(t, "slack/event_callback.reaction_added.no_event_id.json"))},
		{Slack, nil, string(readFixture(t, "slack/slash_command.form-urlencoded.txt"))},
		{Standard, nil, `{"type":"x"}`},
		{Standard, http.Header{"Webhook-Id": {"m"}}, `{"type":"bad\u0001type"}`},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", c.p.Name, i), func(t *testing.T) {
			_, err := c.p.Parse(c.header, []byte(c.body), nil)
			require.ErrorIs(t, err, ErrPayload)
		})
	}
}

func TestSlackURLVerification(t *testing.T) {
	t.Parallel()
	ev, err := Slack.Parse(nil, readFixture(t, "slack/url_verification.json"), nil)
	require.NoError(t, err)
	require.True(t, ev.Ignore)
	want := strings.TrimSpace(string(readFixture(t, "slack/url_verification.expected_response.json")))
	require.Contains(t, want, ev.Reply.(map[string]string)["challenge"])
}

func TestRecordedHeadersDropSignatures(t *testing.T) {
	t.Parallel()
	h := http.Header{"X-Hub-Signature-256": {"sha256=00"}, "X-Hub-Signature": {"sha1=00"}, "X-Github-Event": {"push"}, "Cookie": {"c"}}
	require.Equal(t, map[string]string{"X-Github-Event": "push"}, GitHub.RecordedHeaders(h))
}

// fuzzHeader checks that no header value makes a provider verify a body it
// did not sign, or panic.
func fuzzHeader(f *testing.F, p *Provider, header string, seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		h := http.Header{header: {value}, "Webhook-Id": {"msg"}, "Webhook-Timestamp": {"1700000000"}, "X-Slack-Request-Timestamp": {"1700000000"}}
		if header == "X-Slack-Request-Timestamp" || header == "Webhook-Timestamp" {
			h.Set("X-Slack-Signature", "v0=00")
			h.Set("Webhook-Signature", "v1,AAAA")
		}
		if _, err := p.Verify(h, []byte("{}"), [][]byte{[]byte("whsec_c2VjcmV0")}, time.Unix(1700000000, 0), -1); err == nil {
			t.Fatalf("%s %q verified without a valid signature", header, value)
		}
	})
}

func FuzzStripeSignature(f *testing.F) {
	fuzzHeader(f, Stripe, "Stripe-Signature", "t=1700000000,v1=3bfab77baf5f7b6991a46c9b53b6547d7afc56148b10468fcad9f35c1992ffbd", "t=,v1=", ",,,=")
}

func FuzzGitHubSignature(f *testing.F) {
	fuzzHeader(f, GitHub, "X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=", "sha1=00")
}

func FuzzShopifySignature(f *testing.F) {
	fuzzHeader(f, Shopify, "X-Shopify-Hmac-Sha256", "B23tXN681gZ0qIWbDdE1B6cZyO3xwvSnwV3bb/3kJzE=", "fake", "")
}

func FuzzPaddleSignature(f *testing.F) {
	fuzzHeader(f, Paddle, "Paddle-Signature", "ts=1700000000;h1=a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9", "ts=x;h1=y", ";;=")
}

func FuzzSlackSignature(f *testing.F) {
	fuzzHeader(f, Slack, "X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v0=", "v1=00")
}

func FuzzSlackTimestamp(f *testing.F) {
	fuzzHeader(f, Slack, "X-Slack-Request-Timestamp", "1700000000", "-1", "9999999999999999999")
}

func FuzzStandardSignature(f *testing.F) {
	fuzzHeader(f, Standard, "Webhook-Signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1, v2,", "v1,====")
}

func FuzzStandardTimestamp(f *testing.F) {
	fuzzHeader(f, Standard, "Webhook-Timestamp", "1700000000", "", "1e9")
}

func TestIDFallback(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"usage.recorded","data":{"seq":42,"customer":"c1","meta":{"b":1,"a":2}}}`)
	h := http.Header{"X-Event-Uuid": {"u-1"}}
	id, err := (&IDFallback{Header: "X-Event-Uuid", JSONPath: "data.seq"}).ID(h, body)
	require.NoError(t, err)
	require.Equal(t, "u-1", id, "the header comes first")
	id, err = (&IDFallback{Header: "X-Missing", JSONPath: "data.seq"}).ID(h, body)
	require.NoError(t, err)
	require.Equal(t, "42", id)

	hashed := &IDFallback{HashFields: []string{"type", "data.customer", "data.meta"}}
	id1, err := hashed.ID(nil, body)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id1, "sha256:"))
	reformatted := []byte(`{ "data": {"meta": {"a":2, "b":1}, "customer":"c1", "seq": 43}, "type":"usage.recorded" }`)
	id2, err := hashed.ID(nil, reformatted)
	require.NoError(t, err)
	require.Equal(t, id1, id2, "the hash covers the configured fields only, canonically")

	none, err := (&IDFallback{JSONPath: "nope"}).ID(nil, body)
	require.NoError(t, err)
	require.Empty(t, none)

	// Slack's legacy event without event_id gets one only from a fallback.
	noID := readFixture(t, "slack/event_callback.reaction_added.no_event_id.json")
	_, err = Slack.Parse(nil, noID, nil)
	require.ErrorIs(t, err, ErrPayload)
	ev, err := Slack.Parse(nil, noID, &IDFallback{HashFields: []string{"team_id", "event.event_ts", "event.type"}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ev.ID, "sha256:"))
}

func TestEmptySignatureNeverMatches(t *testing.T) {
	t.Parallel()
	h := http.Header{"Webhook-Id": {"msg"}, "Webhook-Timestamp": {"1700000000"}, "Webhook-Signature": {"v1, v1,="}}
	_, err := Standard.Verify(h, []byte("{}"), [][]byte{[]byte("whsec_not base64!")}, time.Unix(1700000000, 0), -1)
	require.ErrorIs(t, err, ErrSignature)
	_, err = GitHub.Verify(http.Header{"X-Hub-Signature-256": {"sha256="}}, []byte("{}"), [][]byte{[]byte("s")}, time.Now(), -1)
	require.ErrorIs(t, err, ErrSignature)
	_, err = Shopify.Verify(http.Header{"X-Shopify-Hmac-Sha256": {"="}}, []byte("{}"), [][]byte{[]byte("s")}, time.Now(), -1)
	require.ErrorIs(t, err, ErrSignature)
}

// TestStaleMeansAGenuineLateDelivery: a timestamp past the tolerance is
// reported as stale only when the signature matched (a relay held a real
// delivery); a forgery with an old timestamp is a mismatch.
func TestStaleMeansAGenuineLateDelivery(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_late","type":"invoice.paid","created":1700000000}`)
	signedAt := time.Unix(1700000000, 0)
	now := signedAt.Add(10 * time.Minute)
	for _, p := range []*Provider{Stripe, Paddle, Slack, Standard} {
		secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		h, err := p.Sign(secret, Delivery{ID: "msg_late", At: signedAt, Body: body})
		require.NoError(t, err, p.Name)
		_, err = p.Verify(h, body, [][]byte{[]byte(secret)}, now, 5*time.Minute)
		require.Equal(t, ReasonStale, ReasonOf(err), "%s: a real delivery, late", p.Name)
		_, err = p.Verify(h, body, [][]byte{[]byte("whsec_b3RoZXJzZWNyZXRvdGhlcnNlY3JldA==")}, now, 5*time.Minute)
		require.Equal(t, ReasonMismatch, ReasonOf(err), "%s: an old forgery", p.Name)
		_, err = p.Verify(h, body, [][]byte{[]byte(secret)}, now, 0)
		require.NoError(t, err, "%s: tolerance 0 takes it", p.Name)
	}
}
