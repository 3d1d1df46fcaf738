package provider

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Stripe verifies Stripe-Signature: "t=<unix>,v1=<hex>[,v1=<hex>...]", an
// HMAC-SHA256 of "<t>.<body>" keyed with the whole endpoint secret. As in
// Stripe's SDKs, only timestamps older than the tolerance are rejected.
// Thin events (object "v2.core.event", from event destinations) are signed
// the same way and carry the same id and type; their created is an RFC
// 3339 time.
var Stripe = &Provider{
	Name:             "stripe",
	IDLocation:       "the body's id",
	DefaultTolerance: 300 * time.Second,
	SecretPrefix:     "whsec_",
	SignatureHeaders: []string{"Stripe-Signature"},
	Headers:          []string{"User-Agent"},
	VerifyFunc:       verifyStripe,
	ParseFunc:        parseStripe,
	Replayable:       true,
	// The number of endpoints still waiting for the event, as of each
	// attempt.
	VolatileFields: []string{"pending_webhooks"},
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		return http.Header{"Stripe-Signature": {SignStripe(secret, d.At.Unix(), d.Body)}}, nil
	},
}

func verifyStripe(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error) {
	header := h.Get("Stripe-Signature")
	if header == "" {
		return Verification{}, signatureError(ReasonMissing, "missing Stripe-Signature header")
	}
	ts, sigs, err := parseStripeHeader(header)
	if err != nil {
		return Verification{}, err
	}
	signedAt := time.Unix(ts, 0)
	i, ok := matchSecret(secrets, sigs, func(secret []byte) []byte { return StripeSignature(secret, ts, body) })
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "no v1 signature matches the body")
	}
	// After the signature: a stale answer is a genuine delivery held too
	// long (a relay, a queue), never a forgery.
	if err := olderThan(signedAt, now, tolerance); err != nil {
		return Verification{}, err
	}
	return Verification{SecretIndex: i, SignedAt: signedAt}, nil
}

// parseStripeHeader splits a Stripe-Signature header into its timestamp and
// decoded v1 signatures.
func parseStripeHeader(header string) (int64, [][]byte, error) {
	return parseTimestamped(header, ",", "t", "v1", "Stripe-Signature")
}

// StripeSignature computes the v1 signature of body signed at ts.
func StripeSignature(secret []byte, ts int64, body []byte) []byte {
	return hmacSHA256(secret, strconv.AppendInt(nil, ts, 10), []byte{'.'}, body)
}

// SignStripe returns a Stripe-Signature header for body at ts.
func SignStripe(secret string, ts int64, body []byte) string {
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(StripeSignature([]byte(secret), ts, body))
}

func parseStripe(_ http.Header, body []byte) (Parsed, error) {
	var ev struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Created json.RawMessage `json:"created"`
	}
	err := decodeMembers(body, member{Name: "id", Dst: &ev.ID}, member{Name: "type", Dst: &ev.Type}, member{Name: "created", Dst: &ev.Created})
	if err != nil {
		return Parsed{}, payloadError("not a JSON Stripe event: %v", err)
	}
	out := Parsed{ID: ev.ID, Type: ev.Type}
	at, err := stripeCreated(ev.Created)
	if err != nil {
		return Parsed{}, err
	}
	out.OccurredAt = at
	return out, nil
}

// stripeCreated reads an event's created: Unix seconds in a snapshot event
// (object "event"), an RFC 3339 time with milliseconds in a thin event
// (object "v2.core.event"), kept at that precision. Absent or null is the
// zero time.
func stripeCreated(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	var sec int64
	if err := json.Unmarshal(raw, &sec); err == nil {
		if sec <= 0 {
			return time.Time{}, nil
		}
		return unixTime(sec), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, payloadError("created is neither Unix seconds nor an RFC 3339 time: %s", raw)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, payloadError("created %q is not an RFC 3339 time", s)
	}
	return t, nil
}

// StripeID reads an id that Stripe sends as a string or, expanded, as an
// object with an id; it is "" for null.
func StripeID(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.ID
}
