package provider

import (
	"encoding/json"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxIdentityBytes bounds event ids and types: they come from the sender
// (GitHub and Shopify put them in headers their signature does not cover)
// and end up in a unique index and in logs.
const MaxIdentityBytes = 255

// MaxFutureSkew is how far in the future an event may say it happened. An
// occurrence time is a business row's version: one from far in the future
// would pin the row there, and genuine events would never apply again.
const MaxFutureSkew = 24 * time.Hour

// unixTime is time.Unix for a sender's seconds, clamped to the year 9999
// so that an absurd value (math.MaxInt64) stays in the future instead of
// wrapping around into the past.
func unixTime(sec int64) time.Time {
	const maxUnix = 253402300799 // 9999-12-31T23:59:59Z
	return time.Unix(min(sec, maxUnix), 0)
}

// checkIdentity refuses an id or type that is too long, not UTF-8, or that
// holds control or format characters (bidirectional overrides such as
// U+202E, zero-width characters), which make one id read as another on the
// console and in logs.
func checkIdentity(what, v string) error {
	if len(v) > MaxIdentityBytes {
		return payloadError("%s is %d bytes; at most %d are accepted", what, len(v), MaxIdentityBytes)
	}
	if !utf8.ValidString(v) {
		return payloadError("%s is not valid UTF-8", what)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return payloadError("%s contains control characters", what)
	}
	if strings.ContainsFunc(v, func(r rune) bool { return unicode.Is(unicode.Cf, r) }) {
		return payloadError("%s contains invisible format characters (such as bidirectional overrides)", what)
	}
	return nil
}

// CheckOccurredAt refuses an occurrence time more than MaxFutureSkew after
// now; a zero time passes.
func CheckOccurredAt(at, now time.Time) error {
	if !at.IsZero() && at.After(now.Add(MaxFutureSkew)) {
		return payloadError("the event says it happened at %s, more than %s in the future", at.UTC().Format(time.RFC3339), MaxFutureSkew)
	}
	return nil
}

// checkKeys refuses a body whose object holds one of the named keys twice,
// or under another case: Go's decoder matches keys case-insensitively and
// keeps the last duplicate, while PostgreSQL's jsonb keeps the last exact
// key, so such a body would be claimed under one id and stored with
// another. A name "a.b" checks key b of the object under key a.
func checkKeys(body []byte, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var top, nested []string
	for _, n := range names {
		if parent, _, ok := strings.Cut(n, "."); ok {
			nested = append(nested, n)
			top = append(top, parent)
		} else {
			top = append(top, n)
		}
	}
	values, err := objectKeys(body, top)
	if err != nil {
		return err
	}
	for _, n := range nested {
		parent, child, _ := strings.Cut(n, ".")
		if raw, ok := values[parent]; ok {
			if _, err := objectKeys(raw, []string{child}); err != nil {
				return err
			}
		}
	}
	return nil
}

// objectKeys walks the keys of the JSON object in raw, in the parser's
// one pass (scanMembers), and returns the values of the named ones; a
// non-object or a body that is not JSON passes (the provider's parser
// judges it).
func objectKeys(raw []byte, names []string) (map[string]json.RawMessage, error) {
	values := map[string]json.RawMessage{}
	var refused error
	err := scanMembers(raw, func(key, value []byte) error {
		for _, n := range names {
			if !strings.EqualFold(string(key), n) {
				continue
			}
			if string(key) != n {
				refused = payloadError("key %q is a case variant of %q, which identifies the event", key, n)
				return refused
			}
			if _, dup := values[n]; dup {
				refused = payloadError("key %q appears twice", n)
				return refused
			}
			values[n] = value
		}
		return nil
	})
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, nil
	}
	return values, nil
}
