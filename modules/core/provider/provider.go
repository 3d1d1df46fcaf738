// Package provider verifies and identifies webhook deliveries. Each provider
// is one file that fills a Provider: how its signature is checked, where its
// event id, type and occurrence time live, its default timestamp tolerance
// and the headers worth recording. Verification never touches a database.
package provider

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// ErrSignature is wrapped by every verification failure.
var ErrSignature = errors.New("invalid signature")

// ErrPayload is wrapped by every failure to read the event out of a
// verified body.
var ErrPayload = errors.New("bad payload")

// Verification says how a delivery was verified.
type Verification struct {
	// SecretIndex is the position of the configured secret that matched.
	SecretIndex int
	// SignedAt is the signed timestamp; zero when the provider signs none.
	SignedAt time.Time
}

// Parsed is what a verified body says about itself.
type Parsed struct {
	ID   string
	Type string
	// OccurredAt is when the provider says the event happened; may be zero.
	OccurredAt time.Time
	// Ignore marks a delivery that is answered but never stored (a Slack
	// url_verification); Reply is then the response body.
	Ignore bool
	Reply  any
	// UnsignedID marks an id read from a header the signature does not
	// cover (IDFallback.Header): anyone holding one signed delivery could
	// send it again under new ids, so its body is a claim key too
	// (UnsignedIDDigest).
	UnsignedID bool
}

// UnsignedIDDigest is the second claim key of an event whose id came from
// an unsigned header: the signed body, under a prefix of its own, so that
// the same body under another id is the same event.
func UnsignedIDDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return "unsigned-id:sha256:" + hex.EncodeToString(sum[:])
}

// Provider is one webhook sender's conventions.
type Provider struct {
	Name string
	// Replayable says hookledger replay pulls this provider's events back
	// from its API and re-posts them (--target) with X-Replay-Token, so a
	// source of it may honour a replay token; other providers' sources
	// always verify signatures. GitHub's replay asks GitHub to redeliver,
	// signed, and never sends the token, so GitHub is not Replayable.
	Replayable bool
	// DefaultTolerance is the provider SDK's timestamp tolerance; zero when
	// the provider signs no timestamp.
	DefaultTolerance time.Duration
	// ToleranceBothWays says the timestamp check refuses a signed time
	// further than the tolerance ahead of now as well as behind it (Slack,
	// Standard Webhooks); the others refuse old timestamps only, as their
	// SDKs do.
	ToleranceBothWays bool
	// SecretPrefix, when set, is how every signing secret the provider
	// issues starts (Stripe's whsec_): a configured secret without it is
	// probably an API key or another provider's secret.
	SecretPrefix string
	// PublicKeyPrefix, when set, says the provider also signs with
	// asymmetric keys, verified with the sender's public keys, which start
	// with it (Standard Webhooks' v1a and whpk_).
	PublicKeyPrefix string
	// IDLocation says where the event id lives, for error messages.
	IDLocation string
	// BodyKeys are the body's keys that identify the event (id, type,
	// occurrence time; "a.b" for key b under a): each must appear once and
	// exactly so, never as a case variant. Parse checks them in a pass of
	// their own before ParseFunc; a ParseFunc that reads its members with
	// decodeMembers checks them in its own pass and leaves this empty.
	BodyKeys []string
	// SignatureHeaders are never stored.
	SignatureHeaders []string
	// Headers are recorded on the ledger row when present.
	Headers []string
	// VerifyFunc checks the signature against each secret, in order.
	VerifyFunc func(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error)
	// ParseFunc reads the event id and type out of a verified delivery; it
	// leaves them empty when absent and fails only on a body that is not the
	// provider's JSON.
	ParseFunc func(h http.Header, body []byte) (Parsed, error)
	// TypeOptional says a delivery without a type is still an event: the
	// sender signs its id, and its body need not say what it is (Standard
	// Webhooks recommends a type, but does not require one). Its type is
	// then empty, and no handler matches it.
	TypeOptional bool
	// DigestFunc, for a provider that signs only the body and sends the
	// event id in an unsigned header (GitHub, Shopify), digests what the
	// signature covers plus what legitimately tells two events with one
	// body apart; the ledger claims each digest once per namespace, so a
	// captured delivery re-sent under a new id is a duplicate. Nil for
	// providers whose signature covers the id.
	DigestFunc func(h http.Header, body []byte) string
	// VolatileFields are top-level body fields the provider changes
	// between attempts of one event (Stripe's pending_webhooks): a
	// redelivery that differs only there is the same event (BodyIdentity).
	VolatileFields []string
	// MaxBodyBytes is the largest payload the provider documents sending;
	// zero means hookledger's default (1 MiB).
	MaxBodyBytes int64
	// SignFunc builds the headers the provider would send with a delivery:
	// its signature and the headers that identify the event. It serves the
	// simulator, the dev sender and tests.
	SignFunc func(secret string, d Delivery) (http.Header, error)
}

// Delivery is an outgoing event, for SignFunc.
type Delivery struct {
	ID   string
	Type string
	At   time.Time
	Body []byte
}

// Sign returns the headers of a signed delivery.
func (p *Provider) Sign(secret string, d Delivery) (http.Header, error) {
	if d.At.IsZero() {
		d.At = time.Now()
	}
	return p.SignFunc(secret, d)
}

// all lists every provider hookledger knows, by name.
var all = map[string]*Provider{
	Stripe.Name:   Stripe,
	GitHub.Name:   GitHub,
	Shopify.Name:  Shopify,
	Paddle.Name:   Paddle,
	Slack.Name:    Slack,
	Standard.Name: Standard,
}

// Lookup returns the provider called name.
func Lookup(name string) (*Provider, bool) {
	p, ok := all[name]
	return p, ok
}

// Names lists the known provider names, sorted.
func Names() []string {
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Verify checks a delivery. tolerance < 0 means the provider's default;
// 0 turns the timestamp check off.
func (p *Provider) Verify(h http.Header, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (Verification, error) {
	if len(secrets) == 0 {
		return Verification{}, signatureError(ReasonNoSecret, "no secret configured")
	}
	if tolerance < 0 {
		tolerance = p.DefaultTolerance
	}
	return p.VerifyFunc(h, body, secrets, now, tolerance)
}

// Parse reads the event out of a verified body. The provider's own id
// comes first; fb, when set, derives one for a source that sends none.
func (p *Provider) Parse(h http.Header, body []byte, fb *IDFallback) (Parsed, error) {
	if err := checkKeys(body, p.BodyKeys); err != nil {
		return Parsed{}, err
	}
	ev, err := p.ParseFunc(h, body)
	if err != nil {
		return Parsed{}, err
	}
	if ev.Ignore {
		return ev, nil
	}
	if ev.ID == "" && fb != nil {
		if ev.ID, ev.UnsignedID, err = fb.derive(h, body); err != nil {
			return Parsed{}, err
		}
	}
	if ev.ID == "" {
		return Parsed{}, payloadError("%s delivery without its event id (%s)", p.Name, p.IDLocation)
	}
	if ev.Type == "" && !p.TypeOptional {
		return Parsed{}, payloadError("%s delivery without its event type", p.Name)
	}
	if err := checkIdentity("event id", ev.ID); err != nil {
		return Parsed{}, err
	}
	if ev.Type != "" {
		if err := checkIdentity("event type", ev.Type); err != nil {
			return Parsed{}, err
		}
	}
	if err := checkJSONB(body); err != nil {
		return Parsed{}, err
	}
	return ev, nil
}

// RecordedHeaders picks the provider headers worth keeping, signatures
// left out.
func (p *Provider) RecordedHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, name := range p.Headers {
		if v := h.Get(name); v != "" {
			out[http.CanonicalHeaderKey(name)] = v
		}
	}
	for _, name := range p.SignatureHeaders {
		delete(out, http.CanonicalHeaderKey(name))
	}
	return out
}

// Reason is why a signature was refused: a small fixed set, safe as a
// metric label. The detail goes to the log only; the client is told
// nothing but that the delivery is unauthorized.
type Reason string

// Reasons for refusing a signature.
const (
	ReasonMissing   Reason = "missing"
	ReasonMalformed Reason = "malformed"
	ReasonMismatch  Reason = "mismatch"
	// ReasonStale and ReasonFuture are given only once a signature matched:
	// a genuine delivery signed longer ago than the source's tolerance (a
	// relay or queue held it; raise the source's tolerance), or ahead of
	// it. A forged one with an old timestamp is a mismatch.
	ReasonStale    Reason = "stale"
	ReasonFuture   Reason = "future"
	ReasonNoSecret Reason = "no_secret"
)

// SignatureError is a refused signature; it wraps ErrSignature.
type SignatureError struct {
	Reason Reason
	Detail string
}

func (e *SignatureError) Error() string { return ErrSignature.Error() + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrSignature) hold.
func (e *SignatureError) Unwrap() error { return ErrSignature }

// ReasonOf returns the reason of a signature failure, or ReasonMalformed
// for any other error.
func ReasonOf(err error) Reason {
	var se *SignatureError
	if errors.As(err, &se) {
		return se.Reason
	}
	return ReasonMalformed
}

// bodyDigest is the SHA-256 of the parts, each length-prefixed.
func bodyDigest(parts ...[]byte) string {
	sum := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(sum, "%d:", len(p))
		sum.Write(p)
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil))
}

func signatureError(reason Reason, format string, args ...any) error {
	return &SignatureError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

func payloadError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, args...))
}

// checkJSONB rejects what PostgreSQL's jsonb refuses though JSON allows it:
// the escaped NUL character.
func checkJSONB(body []byte) error {
	nul := []byte(`\u0000`)
	for i := bytes.Index(body, nul); i >= 0; {
		backslashes := 0
		for j := i - 1; j >= 0 && body[j] == '\\'; j-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return payloadError(`the body contains \u0000, which PostgreSQL jsonb cannot store`)
		}
		next := bytes.Index(body[i+1:], nul)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return nil
}

// SecretFingerprint names a configured secret or public key without
// revealing it: 12 hex digits of PBKDF2-SHA256 over it, salted with the
// deployment's key (ledger.FingerprintKey, random and kept in the
// database), the same on every host of the deployment and after every
// rotation, where the secret's position in the list moves. Without the
// key a fingerprint (on the console, in a log, in an export of the rows)
// cannot be tested against guessed secrets; with it (a copy of the whole
// database) its iterations make each guess slow, and no table of guesses
// serves two deployments. A receiver computes it once per secret at
// start-up.
func SecretFingerprint(key, secret []byte) string {
	salt := append([]byte("hookledger secret fingerprint:"), key...)
	k, err := pbkdf2.Key(sha256.New, string(secret), salt, fingerprintIterations, 6)
	if err != nil {
		panic(err) // only a key length out of range fails
	}
	return hex.EncodeToString(k)
}

const fingerprintIterations = 20000

// BodyIdentity is what two deliveries of one event must share: a digest of
// the body with the values of its top-level VolatileFields left out, so
// that a redelivery whose body differs elsewhere
// (hookledger_duplicate_mismatch_total) is told apart from a provider's
// per-attempt counter. The body's other bytes count as they are. The
// receiver computes it for every delivery (the ledger keeps its digest to
// compare duplicates with), so it reads the body in one pass and copies
// nothing.
func (p *Provider) BodyIdentity(body []byte) [sha256.Size]byte {
	if len(p.VolatileFields) == 0 {
		return sha256.Sum256(body)
	}
	h := sha256.New()
	last := 0
	err := scanObject(body, func(s *scanner, depth int, key []byte, _ int) error {
		start := s.i
		if err := s.value(depth); err != nil {
			return err
		}
		for _, f := range p.VolatileFields {
			if string(key) == f {
				h.Write(body[last:start])
				last = s.i
				break
			}
		}
		return nil
	})
	if err != nil {
		return sha256.Sum256(body)
	}
	h.Write(body[last:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
