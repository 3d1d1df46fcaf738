package provider

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Slack verifies the Events API's X-Slack-Signature: "v0=" and the hex
// HMAC-SHA256 of "v0:<X-Slack-Request-Timestamp>:<body>", with the timestamp
// within 300 s either way, as Slack's SDKs. The event id is the body's
// event_id; a url_verification is answered with its challenge and never
// stored. Retries carry X-Slack-Retry-Num, which is recorded.
var Slack = &Provider{
	Name:              "slack",
	IDLocation:        "the body's event_id",
	DefaultTolerance:  300 * time.Second,
	ToleranceBothWays: true,
	SignatureHeaders:  []string{"X-Slack-Signature"},
	Headers:           []string{"X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "X-Slack-Retry-Reason", "User-Agent"},
	VerifyFunc:        verifySlack,
	ParseFunc:         parseSlack,
	BodyKeys:          []string{"type", "event_id", "event_time", "event.type"},
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		return http.Header{
			"X-Slack-Request-Timestamp": {strconv.FormatInt(d.At.Unix(), 10)},
			"X-Slack-Signature":         {SignSlack(secret, d.At.Unix(), d.Body)},
		}, nil
	},
}

func verifySlack(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error) {
	tsHeader := h.Get("X-Slack-Request-Timestamp")
	sigHeader := h.Get("X-Slack-Signature")
	if tsHeader == "" || sigHeader == "" {
		return Verification{}, signatureError(ReasonMissing, "missing X-Slack-Request-Timestamp or X-Slack-Signature header")
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return Verification{}, signatureError(ReasonMalformed, "unreadable X-Slack-Request-Timestamp")
	}
	signedAt := time.Unix(ts, 0)
	hexSig, ok := strings.CutPrefix(sigHeader, "v0=")
	if !ok {
		return Verification{}, signatureError(ReasonMalformed, "X-Slack-Signature is not a v0 signature")
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return Verification{}, signatureError(ReasonMalformed, "X-Slack-Signature is not hex")
	}
	i, ok := matchSecret(secrets, [][]byte{sig}, func(secret []byte) []byte { return hmacSHA256(secret, []byte("v0:"+tsHeader+":"), body) })
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "X-Slack-Signature does not match the body")
	}
	if err := withinBothWays(signedAt, now, tolerance); err != nil {
		return Verification{}, err
	}
	return Verification{SecretIndex: i, SignedAt: signedAt}, nil
}

// SignSlack returns X-Slack-Signature for body at ts.
func SignSlack(secret string, ts int64, body []byte) string {
	return "v0=" + hex.EncodeToString(hmacSHA256([]byte(secret), []byte("v0:"+strconv.FormatInt(ts, 10)+":"), body))
}

func parseSlack(_ http.Header, body []byte) (Parsed, error) {
	var p struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
		EventID   string `json:"event_id"`
		EventTime int64  `json:"event_time"`
		Event     struct {
			Type string `json:"type"`
		} `json:"event"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Parsed{}, payloadError("not a JSON Slack Events API payload: %v", err)
	}
	switch p.Type {
	case "url_verification":
		return Parsed{Ignore: true, Reply: map[string]string{"challenge": p.Challenge}}, nil
	case "app_rate_limited":
		// Slack's notice that it dropped events; it has no event id.
		return Parsed{Ignore: true, Reply: map[string]string{"status": "noted"}}, nil
	}
	ev := Parsed{ID: p.EventID, Type: p.Type}
	if p.Event.Type != "" {
		ev.Type = p.Event.Type
	}
	if p.EventTime > 0 {
		ev.OccurredAt = unixTime(p.EventTime)
	}
	return ev, nil
}
