package provider

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// Paddle verifies Paddle Billing's Paddle-Signature: "ts=<unix>;h1=<hex>"
// with one h1 per active secret during a rotation, each an HMAC-SHA256 of
// "<ts>:<body>". As Paddle's SDKs, it rejects timestamps more than 5 s old.
// The event id is the body's event_id (notification_id differs per
// destination and replay), the order key its occurred_at.
var Paddle = &Provider{
	Name:             "paddle",
	IDLocation:       "the body's event_id",
	DefaultTolerance: 5 * time.Second,
	SignatureHeaders: []string{"Paddle-Signature"},
	Headers:          []string{"Paddle-Version", "User-Agent"},
	VerifyFunc:       verifyPaddle,
	ParseFunc:        parsePaddle,
	Replayable:       true,
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		return http.Header{"Paddle-Signature": {SignPaddle(secret, d.At.Unix(), d.Body)}}, nil
	},
}

func verifyPaddle(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error) {
	header := h.Get("Paddle-Signature")
	if header == "" {
		return Verification{}, signatureError(ReasonMissing, "missing Paddle-Signature header")
	}
	ts, sigs, err := parsePaddleHeader(header)
	if err != nil {
		return Verification{}, err
	}
	signedAt := time.Unix(ts, 0)
	tsb := strconv.AppendInt(nil, ts, 10)
	i, ok := matchSecret(secrets, sigs, func(secret []byte) []byte { return hmacSHA256(secret, tsb, []byte{':'}, body) })
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "no h1 signature matches the body")
	}
	if err := olderThan(signedAt, now, tolerance); err != nil {
		return Verification{}, err
	}
	return Verification{SecretIndex: i, SignedAt: signedAt}, nil
}

// parsePaddleHeader splits a Paddle-Signature header into its timestamp and
// decoded h1 signatures.
func parsePaddleHeader(header string) (int64, [][]byte, error) {
	return parseTimestamped(header, ";", "ts", "h1", "Paddle-Signature")
}

// SignPaddle returns a Paddle-Signature value for body at ts.
func SignPaddle(secret string, ts int64, body []byte) string {
	tsb := strconv.AppendInt(nil, ts, 10)
	return "ts=" + string(tsb) + ";h1=" + hex.EncodeToString(hmacSHA256([]byte(secret), tsb, []byte{':'}, body))
}

func parsePaddle(_ http.Header, body []byte) (Parsed, error) {
	var ev struct{ EventID, EventType, OccurredAt string }
	err := decodeMembers(body, member{Name: "event_id", Dst: &ev.EventID}, member{Name: "event_type", Dst: &ev.EventType}, member{Name: "occurred_at", Dst: &ev.OccurredAt})
	if err != nil {
		return Parsed{}, payloadError("not a JSON Paddle event: %v", err)
	}
	out := Parsed{ID: ev.EventID, Type: ev.EventType}
	if t, err := time.Parse(time.RFC3339Nano, ev.OccurredAt); err == nil {
		out.OccurredAt = t
	}
	return out, nil
}
