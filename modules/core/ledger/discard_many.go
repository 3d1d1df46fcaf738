package ledger

import (
	"context"
	"fmt"
	"slices"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
)

// Locate returns the row of eventID as Find does (in namespace when given,
// ErrNotFound, ErrAmbiguous), without its payload and headers. Discard and
// requeue change no payload and read none through it, so they work on a
// sealed ledger without PAYLOAD_KEYS.
func (s *Store) Locate(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error) {
	rows, err := s.ent.WebhookEvent.Query().
		Where(inNamespace(namespace), webhookevent.EventID(eventID)).
		Select(listFields...).Limit(10).All(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("find %s: %w", eventID, err)
	case len(rows) == 0:
		return nil, ErrNotFound
	case len(rows) > 1:
		return nil, fmt.Errorf("%w: pass a namespace (%s)", ErrAmbiguous, namespaces(rows))
	}
	return rows[0], nil
}

// DiscardMany discards the events of keys with one reason, all of them or
// none: each is discarded as Discard does one (the lifecycle table's
// check under its row's lock, its own jobs cancelled), all in one
// transaction, the rows locked in key order. The first event refused
// (unknown, settled, erased, or being applied right now) ends it with
// nothing changed, its key in the error. Like Discard it never waits for
// a lock, and tries again briefly while an apply holds a row. It returns
// the discarded rows, in keys' order, as Locate reads them.
func (s *Store) DiscardMany(ctx context.Context, keys []EventKey, reason string) ([]*ent.WebhookEvent, error) {
	reason, err := discardReason(reason)
	if err != nil {
		return nil, err
	}
	ordered := slices.SortedFunc(slices.Values(keys), EventKey.compare)
	ordered = slices.Compact(ordered)
	err = retryWhileApplied(ctx, func() error {
		return InTx(ctx, s.db, func(tx *Tx) error {
			for _, k := range ordered {
				if err := s.discard(ctx, tx, k.Namespace, k.EventID, reason); err != nil {
					return fmt.Errorf("%s/%s: %w", k.Namespace, k.EventID, err)
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	rows := make([]*ent.WebhookEvent, len(keys))
	for i, k := range keys {
		if rows[i], err = s.Locate(ctx, k.Namespace, k.EventID); err != nil {
			return nil, fmt.Errorf("%s/%s: read after discard: %w", k.Namespace, k.EventID, err)
		}
	}
	return rows, nil
}
