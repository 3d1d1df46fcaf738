package provider

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
//
// Asymmetric signatures ("v1a,<base64 ed25519 signature>" over the same
// content, in the same header beside v1 entries) are checked against the
// configured public keys: a "secret" with the whpk_ prefix (base64 of the
// 32-byte ed25519 public key) is one, matched against v1a entries only; a
// whsec_ secret is matched against v1 entries only. A receiver never needs
// the signing key (whsk_); configuration refuses one.
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
	var sigs, asym [][]byte
	for _, entry := range strings.Fields(sigHeader) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || (version != "v1" && version != "v1a") {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		switch {
		case err != nil || len(sig) == 0:
		case version == "v1":
			sigs = append(sigs, sig)
		case len(sig) == ed25519.SignatureSize:
			asym = append(asym, sig)
		}
	}
	if len(sigs) == 0 && len(asym) == 0 {
		return Verification{}, signatureError(ReasonMalformed, "no v1 or v1a signature in webhook-signature")
	}
	signed := []byte(id + "." + tsHeader + "." + string(body))
	for i, secret := range secrets {
		if IsStandardPublicKey(secret) {
			pub, err := StandardPublicKey(secret)
			if err != nil {
				continue // an unusable key matches nothing
			}
			for _, sig := range asym {
				if ed25519.Verify(pub, signed, sig) {
					return Verification{SecretIndex: i, SignedAt: signedAt}, nil
				}
			}
			continue
		}
		if _, ok := matchSecret([][]byte{secret}, sigs, func(secret []byte) []byte {
			key, err := StandardKey(secret)
			if err != nil {
				return nil // never equal to a signature
			}
			return hmacSHA256(key, signed)
		}); ok {
			return Verification{SecretIndex: i, SignedAt: signedAt}, nil
		}
	}
	return Verification{}, signatureError(ReasonMismatch, "no v1 or v1a signature matches the body")
}

// Standard Webhooks key prefixes: the ed25519 public key a receiver
// verifies v1a signatures with, and the signing key only a sender holds.
const (
	StandardPublicKeyPrefix  = "whpk_"
	StandardSigningKeyPrefix = "whsk_"
)

// CheckStandardKey refuses what a Standard Webhooks receiver cannot use: a
// whsec_ secret or whpk_ public key that does not decode, and any whsk_
// signing key (only the sender needs it; a receiver holds the public key).
func CheckStandardKey(key string) error {
	switch {
	case strings.HasPrefix(key, StandardSigningKeyPrefix):
		return errors.New("a whsk_ key is the sender's ed25519 signing key: a receiver needs only its public key (whpk_); keep the signing key off this host")
	case IsStandardPublicKey([]byte(key)):
		_, err := StandardPublicKey([]byte(key))
		return err
	}
	if _, err := StandardKey([]byte(key)); err != nil {
		return fmt.Errorf("not a Standard Webhooks secret (whsec_ and base64) nor a public key (whpk_ and base64): %w", err)
	}
	return nil
}

// IsStandardPublicKey reports whether a configured key is an ed25519
// public key (whpk_) rather than an HMAC secret.
func IsStandardPublicKey(key []byte) bool {
	return strings.HasPrefix(string(key), StandardPublicKeyPrefix)
}

// StandardPublicKey decodes a whpk_ key: base64 (padding optional) of a
// 32-byte ed25519 public key.
func StandardPublicKey(key []byte) (ed25519.PublicKey, error) {
	raw, err := decodeBase64(strings.TrimPrefix(string(key), StandardPublicKeyPrefix))
	if err != nil {
		return nil, fmt.Errorf("public key is not base64: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key is %d bytes; an ed25519 public key is %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// standardSigningKey decodes a whsk_ key: base64 of the 64-byte ed25519
// private key, or of its 32-byte seed.
func standardSigningKey(key string) (ed25519.PrivateKey, error) {
	raw, err := decodeBase64(strings.TrimPrefix(key, StandardSigningKeyPrefix))
	switch {
	case err != nil:
		return nil, fmt.Errorf("signing key is not base64: %w", err)
	case len(raw) == ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case len(raw) == ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("signing key is %d bytes; want a %d-byte ed25519 key or its %d-byte seed", len(raw), ed25519.PrivateKeySize, ed25519.SeedSize)
}

// StandardPublicKeyOf returns the whpk_ public key of a whsk_ signing key.
func StandardPublicKeyOf(signingKey string) (string, error) {
	priv, err := standardSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return StandardPublicKeyPrefix + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)), nil
}

func decodeBase64(s string) ([]byte, error) {
	if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
		return raw, nil
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

// SignStandard returns a webhook-signature value for a delivery: v1 with a
// whsec_ secret, v1a with a whsk_ signing key.
func SignStandard(secret, id string, ts int64, body []byte) (string, error) {
	signed := []byte(id + "." + strconv.FormatInt(ts, 10) + "." + string(body))
	if strings.HasPrefix(secret, StandardSigningKeyPrefix) {
		priv, err := standardSigningKey(secret)
		if err != nil {
			return "", err
		}
		return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, signed)), nil
	}
	key, err := StandardKey([]byte(secret))
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(key, signed)), nil
}

func parseStandard(h http.Header, body []byte) (Parsed, error) {
	var p struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Parsed{}, payloadError("not a JSON Standard Webhooks payload: %v", err)
	}
	ev := Parsed{ID: standardHeader(h, "Id"), Type: p.Type}
	if t, err := time.Parse(time.RFC3339Nano, p.Timestamp); err == nil {
		ev.OccurredAt = t
	}
	return ev, nil
}
