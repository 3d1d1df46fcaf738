package provider

import (
	"crypto/hmac"
	"crypto/sha256"
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
		return signatureError("timestamp %d is older than the %s tolerance", signedAt.Unix(), tolerance)
	case -d > tolerance:
		return signatureError("timestamp %d is more than %s in the future", signedAt.Unix(), tolerance)
	}
	return nil
}
