package ledger

import (
	"context"
	"fmt"
)

// StoredPayloads returns the stored bodies of the events of keys that the
// ledger holds, by key; a key it does not hold is left out.
func (s *Store) StoredPayloads(ctx context.Context, keys []EventKey) (map[EventKey][]byte, error) {
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT namespace, event_id, payload FROM webhook_event
		WHERE (namespace, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, namespaces, ids)
	if err != nil {
		return nil, fmt.Errorf("stored payloads: %w", err)
	}
	defer rows.Close()
	out := make(map[EventKey][]byte, len(keys))
	for rows.Next() {
		var (
			k EventKey
			p []byte
		)
		if err := rows.Scan(&k.Namespace, &k.EventID, &p); err != nil {
			return nil, fmt.Errorf("stored payloads: %w", err)
		}
		if out[k], err = s.sealer.Open(k, p); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stored payloads: %w", err)
	}
	return out, nil
}

// StoredBody is what the ledger holds to compare a duplicate's body with
// (StoredBodies): the digest of the stored body's identity, or, for a row
// claimed before digests were kept, the body itself when it is at most
// LegacyBodyBytes.
type StoredBody struct {
	identity string
	legacy   []byte
	sealer   *Sealer
}

// LegacyBodyBytes bounds the stored body StoredBodies reads of a row that
// has no identity digest (claimed before digests were kept); a larger one
// is not read, and such a duplicate is not compared.
const LegacyBodyBytes = 256 << 10

// Same reports whether the body whose identity is sum is the stored
// one; identityOf computes the identity of a legacy row's body. known is
// false when the ledger cannot tell: an erased row, a legacy body over
// LegacyBodyBytes, a digest under a payload key no longer configured.
func (b StoredBody) Same(sum []byte, identityOf func([]byte) []byte) (same, known bool) {
	if b.identity != "" {
		return b.sealer.sameIdentity(b.identity, sum)
	}
	if b.legacy == nil || string(b.legacy) == ErasedPayload {
		return false, false
	}
	return string(identityOf(b.legacy)) == string(sum), true
}

// StoredBodies returns, for each key the ledger holds, what a duplicate's
// body is compared with (StoredBody). It reads identity digests, never a
// stored body, but for rows claimed before digests were kept, whose
// bodies it reads only up to LegacyBodyBytes each: three concurrent
// duplicates of a 20 MB event once took a receiver from 186 MB to 1.2 GB
// reading and opening the stored body of each.
func (s *Store) StoredBodies(ctx context.Context, keys []EventKey) (map[EventKey]StoredBody, error) {
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT namespace, event_id, coalesce(body_identity, ''),
			CASE WHEN body_identity IS NULL AND erased_at IS NULL AND octet_length(payload) <= $3 THEN payload END
		FROM webhook_event
		WHERE (namespace, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, namespaces, ids, LegacyBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("stored bodies: %w", err)
	}
	defer rows.Close()
	out := make(map[EventKey]StoredBody, len(keys))
	for rows.Next() {
		var (
			k      EventKey
			b      = StoredBody{sealer: s.sealer}
			stored []byte
		)
		if err := rows.Scan(&k.Namespace, &k.EventID, &b.identity, &stored); err != nil {
			return nil, fmt.Errorf("stored bodies: %w", err)
		}
		if stored != nil {
			// A legacy body no key opens is one the ledger cannot tell.
			b.legacy, _ = s.sealer.Open(k, stored)
		}
		out[k] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stored bodies: %w", err)
	}
	return out, nil
}
