// Package intake turns a delivery into its ledger claim: it knows a
// source's identity (its name, the ledger namespace it claims into, its
// provider, how ids are found for a sender that sends none, whether the
// body is a second claim key) and reads the event's id, type and
// recorded headers. The HTTP receiver calls it after verifying a request,
// and replay's direct mode calls it for events pulled back from a
// provider's API, so both claim exactly the same row.
package intake

import (
	"net/http"
	"time"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// ReplayTokenHeader carries the replay token: a receiver that has one
// claims the delivery without verifying its signature, marked replayed.
const ReplayTokenHeader = "X-Replay-Token"

// Source is where deliveries come from, as far as the ledger is concerned.
type Source struct {
	Name      string
	Namespace string
	Provider  *provider.Provider
	// IDFallback derives ids for a sender that sends none; usually nil.
	IDFallback *provider.IDFallback
	// BodyDedup claims the body digest too, for providers that sign only
	// the body (see provider.Provider.DigestFunc).
	BodyDedup bool
}

// Prepare turns a delivery into its claim: the event's id and type from
// the body (or headers), the headers worth recording, and how it was
// verified. verified is nil for a replay, which is not verified but marked
// replayed. An event the provider sends only to be answered (ev.Ignore,
// such as Slack's url_verification) has no claim.
func (s *Source) Prepare(h http.Header, body []byte, verified *provider.Verification, now time.Time) (ledger.Claim, provider.Parsed, error) {
	ev, err := s.Provider.Parse(h, body, s.IDFallback)
	if err != nil || ev.Ignore {
		return ledger.Claim{}, ev, err
	}
	if err := provider.CheckOccurredAt(ev.OccurredAt, now); err != nil {
		return ledger.Claim{}, ev, err
	}
	claim := ledger.Claim{
		Namespace:  s.Namespace,
		EventID:    ev.ID,
		Provider:   s.Provider.Name,
		Source:     s.Name,
		Type:       ev.Type,
		Payload:    body,
		OccurredAt: ev.OccurredAt,
		Headers:    s.Provider.RecordedHeaders(h),
		Replayed:   verified == nil,
	}
	switch {
	case ev.UnsignedID:
		// The id is the sender's word, outside the signature: the signed
		// body is the event, whatever id a copy of it comes under.
		claim.BodyDigest = provider.UnsignedIDDigest(body)
	case s.BodyDedup && s.Provider.DigestFunc != nil:
		claim.BodyDigest = s.Provider.DigestFunc(h, body)
	}
	if verified != nil {
		idx := verified.SecretIndex
		claim.SecretIndex = &idx
		if !verified.SignedAt.IsZero() {
			skew := now.Sub(verified.SignedAt)
			claim.ClockSkew = &skew
		}
	}
	return claim, ev, nil
}
