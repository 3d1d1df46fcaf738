package provider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Shopify verifies X-Shopify-Hmac-Sha256: the base64 HMAC-SHA256 of the body
// keyed with the app's client secret. Shopify signs no timestamp; its
// X-Shopify-Triggered-At is recorded as the occurrence time. The event id is
// X-Shopify-Event-Id (shared by every delivery of one event), falling back
// to X-Shopify-Webhook-Id. Newer deliveries use the same names without the
// X- prefix; both are read.
var Shopify = &Provider{
	Name:             "shopify",
	IDLocation:       "X-Shopify-Event-Id or X-Shopify-Webhook-Id header",
	SignatureHeaders: []string{"X-Shopify-Hmac-Sha256", "Shopify-Hmac-Sha256"},
	Headers: []string{"X-Shopify-Topic", "X-Shopify-Shop-Domain", "X-Shopify-API-Version", "X-Shopify-Webhook-Id",
		"X-Shopify-Event-Id", "X-Shopify-Triggered-At", "X-Shopify-Name",
		"Shopify-Topic", "Shopify-Shop-Domain", "Shopify-API-Version", "Shopify-Webhook-Id", "Shopify-Event-Id", "Shopify-Triggered-At"},
	VerifyFunc: verifyShopify,
	ParseFunc:  parseShopify,
	// The same body under another id is a replay, whatever topic it comes
	// under (the topic is unsigned), except for the topics Shopify sends
	// with one body (products/create and products/update when a product is
	// created and published): shopifySharedBodies.
	DigestFunc: func(h http.Header, body []byte) string {
		return familyDigest(shopifySharedBodies, shopifyHeader(h, "Topic"), body)
	},
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		return http.Header{
			"X-Shopify-Hmac-Sha256":  {SignShopify(secret, d.Body)},
			"X-Shopify-Event-Id":     {d.ID},
			"X-Shopify-Webhook-Id":   {d.ID},
			"X-Shopify-Topic":        {d.Type},
			"X-Shopify-Triggered-At": {d.At.UTC().Format(time.RFC3339Nano)},
		}, nil
	},
}

// shopifyHeader reads a Shopify header under either of its names.
func shopifyHeader(h http.Header, name string) string {
	if v := h.Get("X-Shopify-" + name); v != "" {
		return v
	}
	return h.Get("Shopify-" + name)
}

func verifyShopify(h http.Header, body []byte, secrets [][]byte, _ time.Time, _ time.Duration) (Verification, error) {
	header := shopifyHeader(h, "Hmac-Sha256")
	if header == "" {
		return Verification{}, signatureError(ReasonMissing, "missing X-Shopify-Hmac-Sha256 header")
	}
	sig, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		return Verification{}, signatureError(ReasonMalformed, "X-Shopify-Hmac-Sha256 is not base64")
	}
	i, ok := matchSecret(secrets, [][]byte{sig}, func(secret []byte) []byte { return hmacSHA256(secret, body) })
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "X-Shopify-Hmac-Sha256 does not match the body")
	}
	return Verification{SecretIndex: i}, nil
}

// SignShopify returns an X-Shopify-Hmac-Sha256 value for body.
func SignShopify(secret string, body []byte) string {
	return base64.StdEncoding.EncodeToString(hmacSHA256([]byte(secret), body))
}

// shopifyTopic is the shape of Shopify's topics, lower-cased: resource and
// action, each of letters, digits and _, joined by / (orders/create) or,
// for a few newer ones, by . (customer.tags_added). The topic is unsigned,
// so one event cannot be spelled many ways.
var shopifyTopic = regexp.MustCompile(`^[a-z0-9_]+(?:[/.][a-z0-9_]+)+$`)

func parseShopify(h http.Header, body []byte) (Parsed, error) {
	if !json.Valid(body) {
		return Parsed{}, payloadError("not a JSON Shopify payload")
	}
	ev := Parsed{ID: shopifyHeader(h, "Event-Id"), Type: strings.ToLower(shopifyHeader(h, "Topic"))}
	if ev.Type != "" && !shopifyTopic.MatchString(ev.Type) {
		return Parsed{}, payloadError("X-Shopify-Topic %q is not a topic (resource/action: letters, digits and _)", shopifyHeader(h, "Topic"))
	}
	if ev.Type != "" {
		if err := checkShopifyTopic(ev.Type, body); err != nil {
			return Parsed{}, err
		}
	}
	if ev.ID == "" {
		ev.ID = shopifyHeader(h, "Webhook-Id")
	}
	if t, err := time.Parse(time.RFC3339Nano, shopifyHeader(h, "Triggered-At")); err == nil {
		ev.OccurredAt = t
	}
	return ev, nil
}
