package provider

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
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
// configured public keys: a key with the whpk_ prefix (base64 of the
// 32-byte ed25519 public key) is one, matched against v1a entries only; a
// whsec_ secret is matched against v1 entries only. Configuration decides
// the prefix by the variable a key came from (public keys must carry it,
// secrets must not), so a public key is never an HMAC key. A receiver
// never needs the signing key (whsk_); configuration refuses one.
//
// The signature list is capped (MaxStandardSignatures per scheme) and
// deduplicated before any cryptography, and the signed content is built
// once per delivery.
var Standard = &Provider{
	Name:              "standard",
	IDLocation:        "webhook-id header",
	DefaultTolerance:  300 * time.Second,
	ToleranceBothWays: true,
	PublicKeyPrefix:   StandardPublicKeyPrefix,
	SignatureHeaders:  []string{"Webhook-Signature", "Svix-Signature"},
	Headers:           []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Topic", "Svix-Id", "Svix-Timestamp", "User-Agent"},
	VerifyFunc:        verifyStandard,
	ParseFunc:         parseStandard,
	TypeOptional:      true,
	BodyKeys:          []string{"type", "timestamp"},
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

// MaxStandardSignatures is how many entries of one scheme (v1, v1a) a
// webhook-signature header may hold. A sender lists one per active key,
// two or three during a rotation; a longer list is refused before any
// cryptography, since each v1a entry costs an ed25519 verification (over
// the whole body) per configured public key.
const MaxStandardSignatures = 10

// standardSignatures reads a webhook-signature header into its distinct
// v1 (HMAC) and v1a (ed25519) signatures, refusing a header with more than
// MaxStandardSignatures entries of either scheme. Entries of other
// schemes and undecodable ones are skipped, as the Standard Webhooks
// libraries do.
func standardSignatures(header string) (v1, v1a [][]byte, err error) {
	var n1, n1a int
	for entry := range strings.FieldsSeq(header) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok {
			continue
		}
		switch version {
		case "v1":
			n1++
		case "v1a":
			n1a++
		default:
			continue
		}
		if n1 > MaxStandardSignatures || n1a > MaxStandardSignatures {
			return nil, nil, signatureError(ReasonMalformed, "more than %d %s signatures in webhook-signature", MaxStandardSignatures, version)
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		switch {
		case err != nil || len(sig) == 0:
		case version == "v1":
			v1 = appendDistinct(v1, sig)
		case len(sig) == ed25519.SignatureSize:
			v1a = appendDistinct(v1a, sig)
		}
	}
	if len(v1) == 0 && len(v1a) == 0 {
		return nil, nil, signatureError(ReasonMalformed, "no v1 or v1a signature in webhook-signature")
	}
	return v1, v1a, nil
}

// appendDistinct appends sig unless list holds it already.
func appendDistinct(list [][]byte, sig []byte) [][]byte {
	for _, have := range list {
		if bytes.Equal(have, sig) {
			return list
		}
	}
	return append(list, sig)
}

// standardSigned is the signed content, "<id>.<timestamp>.<body>", built
// once per delivery.
func standardSigned(id, ts string, body []byte) []byte {
	signed := make([]byte, 0, len(id)+len(ts)+2+len(body))
	signed = append(signed, id...)
	signed = append(signed, '.')
	signed = append(signed, ts...)
	signed = append(signed, '.')
	return append(signed, body...)
}

// ed25519Verify is crypto/ed25519's Verify; tests count its calls.
var ed25519Verify = ed25519.Verify

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
	sigs, asym, err := standardSignatures(sigHeader)
	if err != nil {
		return Verification{}, err
	}
	i, ok := matchStandard(standardKeys(secrets), standardSigned(id, tsHeader, body), sigs, asym)
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "no v1 or v1a signature matches the body")
	}
	// After the signature: a stale answer is a genuine delivery held too
	// long (a relay, a queue), never a forgery.
	if err := withinBothWays(signedAt, now, tolerance); err != nil {
		return Verification{}, err
	}
	return Verification{SecretIndex: i, SignedAt: signedAt}, nil
}

// matchStandard returns the position of the first key that one of the
// entries was signed with: a public key for v1a entries, a secret for v1.
func matchStandard(keys []standardKey, signed []byte, sigs, asym [][]byte) (int, bool) {
	for i, k := range keys {
		switch {
		case k.public != nil:
			for _, sig := range asym {
				if ed25519Verify(k.public, signed, sig) {
					return i, true
				}
			}
		case k.hmac != nil && len(sigs) > 0:
			want := hmacSHA256(k.hmac, signed)
			for _, sig := range sigs {
				if hmac.Equal(sig, want) {
					return i, true
				}
			}
		}
	}
	return 0, false
}

// standardKey is one configured key, decoded: an ed25519 public key for v1a
// entries, or an HMAC key for v1 entries; never both. Neither is set for a
// key that cannot be used; it matches nothing.
type standardKey struct {
	public ed25519.PublicKey
	hmac   []byte
}

// standardKeys decodes the configured keys. A whpk_ key is a public key
// and only that; configuration refuses a whpk_ value among the secrets and
// any public key without the prefix, so the prefix says which list a key
// came from. As a last guard, a secret whose HMAC key equals one of the
// public keys is unusable: a key everyone may know never signs v1.
func standardKeys(secrets [][]byte) []standardKey {
	keys := make([]standardKey, len(secrets))
	for i, secret := range secrets {
		if IsStandardPublicKey(secret) {
			if pub, err := StandardPublicKey(secret); err == nil {
				keys[i].public = pub
			}
		}
	}
	for i, secret := range secrets {
		if IsStandardPublicKey(secret) || strings.HasPrefix(string(secret), StandardSigningKeyPrefix) {
			continue
		}
		key, err := StandardKey(secret)
		if err != nil || len(key) == 0 {
			continue
		}
		public := false
		for _, k := range keys {
			public = public || (k.public != nil && bytes.Equal(k.public, key))
		}
		if !public {
			keys[i].hmac = key
		}
	}
	return keys
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
	if ev.Type == "" {
		// A sender that publishes its data verbatim (Hookdeck Outpost)
		// names the topic in a header; without either the type is empty.
		ev.Type = h.Get("Webhook-Topic")
	}
	if t, err := time.Parse(time.RFC3339Nano, p.Timestamp); err == nil {
		ev.OccurredAt = t
	}
	return ev, nil
}
