package provider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard verifies Standard Webhooks (and Svix, which sends the same
// headers named svix-*): webhook-signature is a space-separated list of
// "v1,<base64 HMAC-SHA256>" over "<webhook-id>.<webhook-timestamp>.<body>",
// keyed with the base64 secret after its whsec_ prefix; the timestamp must
// be within 300 s either way. The id is webhook-id, so a delivery without it
// cannot be verified.
var Standard = &Provider{
	Name:             "standard",
	IDLocation:       "webhook-id header",
	DefaultTolerance: 300 * time.Second,
	SignatureHeaders: []string{"Webhook-Signature", "Svix-Signature"},
	Headers:          []string{"Webhook-Id", "Webhook-Timestamp", "Svix-Id", "Svix-Timestamp", "User-Agent"},
	VerifyFunc:       verifyStandard,
	ParseFunc:        parseStandard,
	BodyKeys:         []string{"type", "timestamp"},
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		sig, err := SignStandard(secret, d.ID, d.At.Unix(), d.Body)
		if err != nil {
			return nil, err
		}
		return http.Header{
			"Webhook-Id":        {d.ID},
			"Webhook-Timestamp": {strconv.FormatInt(d.At.Unix(), 10)},
			"Webhook-Signature": {sig},
		}, nil
	},
}

// standardHeader reads a Standard Webhooks header, or its Svix twin.
func standardHeader(h http.Header, name string) string {
	if v := h.Get("Webhook-" + name); v != "" {
		return v
	}
	return h.Get("Svix-" + name)
}

// StandardKey decodes a Standard Webhooks secret: base64, with or without
// the whsec_ prefix and padding.
func StandardKey(secret []byte) ([]byte, error) {
	s := strings.TrimPrefix(string(secret), "whsec_")
	if key, err := base64.StdEncoding.DecodeString(s); err == nil {
		return key, nil
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

func verifyStandard(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error) {
	id, tsHeader, sigHeader := standardHeader(h, "Id"), standardHeader(h, "Timestamp"), standardHeader(h, "Signature")
	switch {
	case id == "":
		return Verification{}, signatureError(ReasonMissing, "missing webhook-id header")
	case tsHeader == "":
		return Verification{}, signatureError(ReasonMissing, "missing webhook-timestamp header")
	case sigHeader == "":
		return Verification{}, signatureError(ReasonMissing, "missing webhook-signature header")
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return Verification{}, signatureError(ReasonMalformed, "unreadable webhook-timestamp")
	}
	signedAt := time.Unix(ts, 0)
	if err := withinBothWays(signedAt, now, tolerance); err != nil {
		return Verification{}, err
	}
	var sigs [][]byte
	for _, entry := range strings.Fields(sigHeader) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if sig, err := base64.StdEncoding.DecodeString(b64); err == nil && len(sig) > 0 {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return Verification{}, signatureError(ReasonMalformed, "no v1 signature in webhook-signature")
	}
	i, ok := matchSecret(secrets, sigs, func(secret []byte) []byte {
		key, err := StandardKey(secret)
		if err != nil {
			return nil // never equal to a signature
		}
		return hmacSHA256(key, []byte(id+"."+tsHeader+"."), body)
	})
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "no v1 signature matches the body")
	}
	return Verification{SecretIndex: i, SignedAt: signedAt}, nil
}

// SignStandard returns a webhook-signature value for a delivery.
func SignStandard(secret, id string, ts int64, body []byte) (string, error) {
	key, err := StandardKey([]byte(secret))
	if err != nil {
		return "", err
	}
	mac := hmacSHA256(key, []byte(id+"."+strconv.FormatInt(ts, 10)+"."), body)
	return "v1," + base64.StdEncoding.EncodeToString(mac), nil
}

func parseStandard(h http.Header, body []byte) (Event, error) {
	var p struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, payloadError("not a JSON Standard Webhooks payload: %v", err)
	}
	ev := Event{ID: standardHeader(h, "Id"), Type: p.Type}
	if t, err := time.Parse(time.RFC3339Nano, p.Timestamp); err == nil {
		ev.OccurredAt = t
	}
	return ev, nil
}
