package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// hmacSHA256 is the HMAC-SHA256 of the concatenated parts.
func hmacSHA256(key []byte, parts ...[]byte) []byte {
	mac := hmac.New(sha256.New, key)
	for _, p := range parts {
		mac.Write(p)
	}
	return mac.Sum(nil)
}

// withinBothWays rejects a signed time further than tolerance from now in
// either direction (Slack, Standard Webhooks); 0 turns the check off.
func withinBothWays(signedAt, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		return nil
	}
	switch d := now.Sub(signedAt); {
	case d > tolerance:
		return signatureError(ReasonStale, "timestamp %d is older than the %s tolerance", signedAt.Unix(), tolerance)
	case -d > tolerance:
		return signatureError(ReasonFuture, "timestamp %d is more than %s in the future", signedAt.Unix(), tolerance)
	}
	return nil
}

// matchSecret returns the position of the first secret whose expected
// signature equals one of sigs, comparing in constant time.
func matchSecret(secrets, sigs [][]byte, expected func(secret []byte) []byte) (int, bool) {
	for i, secret := range secrets {
		want := expected(secret)
		if len(want) == 0 {
			continue // an unusable secret matches nothing, not even an empty signature
		}
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return i, true
			}
		}
	}
	return 0, false
}

// parseTimestamped splits a "t=<unix>,v1=<hex>,v1=<hex>"-style header
// (Stripe, Paddle) into its timestamp and decoded signatures. Entries of
// other schemes and undecodable signatures are skipped, as the providers'
// SDKs do.
func parseTimestamped(header, sep, tsKey, sigKey, name string) (int64, [][]byte, error) {
	var (
		ts    int64
		hasTS bool
		sigs  [][]byte
	)
	for _, part := range strings.Split(header, sep) {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case tsKey:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, nil, signatureError(ReasonMalformed, "unreadable %s in %s", tsKey, name)
			}
			ts, hasTS = n, true
		case sigKey:
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		}
	}
	if !hasTS {
		return 0, nil, signatureError(ReasonMalformed, "no %s timestamp in %s", tsKey, name)
	}
	if len(sigs) == 0 {
		return 0, nil, signatureError(ReasonMalformed, "no %s signature in %s", sigKey, name)
	}
	return ts, sigs, nil
}

// olderThan rejects a signed time more than tolerance in the past (Stripe,
// Paddle: their SDKs accept future timestamps); 0 turns the check off.
func olderThan(signedAt, now time.Time, tolerance time.Duration) error {
	if tolerance > 0 && now.Sub(signedAt) > tolerance {
		return signatureError(ReasonStale, "timestamp %d is older than the %s tolerance", signedAt.Unix(), tolerance)
	}
	return nil
}
