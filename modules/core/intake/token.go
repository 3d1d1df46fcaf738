package intake

import (
	"crypto/sha256"
	"crypto/subtle"
)

// TokenEqual reports whether got is the token want, in a time that tells
// nothing of either's content or length: both are hashed to SHA-256 and the
// fixed-size digests compared in constant time (comparing the strings
// themselves returns at once when their lengths differ, which tells a
// prober the token's length). An empty want matches nothing.
func TokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1 && want != ""
}
