package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/ent/webhookevent"
)

// Claim is a verified delivery about to be claimed.
type Claim struct {
	Namespace  string
	EventID    string
	Provider   string
	Source     string
	Type       string
	Payload    []byte
	OccurredAt time.Time
	Headers    map[string]string
	// SecretIndex is the position of the secret that matched; nil for a
	// replayed delivery, which is not verified.
	SecretIndex *int
	// ClockSkew is receive time minus the signed timestamp; nil when the
	// provider signs none.
	ClockSkew *time.Duration
	Replayed  bool
	// BodyDigest, when set, is a second claim key within the namespace:
	// for providers that sign only the body, the same signed body under
	// another id is a replay, answered as a duplicate.
	BodyDigest string
}

func (c Claim) key() EventKey { return EventKey{Namespace: c.Namespace, EventID: c.EventID} }

// Claim inserts the ledger row and its apply job in one transaction, so a
// committed claim is always applied: the row with INSERT ... ON CONFLICT DO NOTHING
// RETURNING and, when this call inserted it, the apply job. It returns
// true for a new event and false for a duplicate. A payload that jsonb
// would refuse is refused first (ErrUnstorable), with no database access.
func (c *Store) Claim(ctx context.Context, in Claim) (bool, error) {
	if err := CheckPayload(in.Payload); err != nil {
		return false, fmt.Errorf("claim %s/%s: %w", in.Namespace, in.EventID, err)
	}
	var claimed bool
	err := InTx(ctx, c.db, func(tx *Tx) error {
		create := tx.Ent.WebhookEvent.Create().
			SetNamespace(in.Namespace).
			SetEventID(in.EventID).
			SetProvider(in.Provider).
			SetSource(in.Source).
			SetEventType(in.Type).
			SetPayload(string(in.Payload)).
			SetHeaders(in.Headers).
			SetNillableSecretIndex(in.SecretIndex).
			SetReplayed(in.Replayed)
		if !in.OccurredAt.IsZero() {
			create.SetOccurredAt(in.OccurredAt)
		}
		if in.ClockSkew != nil {
			create.SetClockSkewMs(in.ClockSkew.Milliseconds())
		}
		if in.BodyDigest != "" {
			create.SetBodyDigest(in.BodyDigest)
		}
		// No conflict target: a conflict on either unique key, the event
		// id or the body digest, is a duplicate.
		_, err := create.OnConflict().DoNothing().ID(ctx)
		switch {
		case err == nil:
			claimed = true
		case errors.Is(err, sql.ErrNoRows):
			if !c.logOnly {
				return nil
			}
			if ok, err := hasRow(ctx, tx, in); err != nil || !ok {
				return err // a body-digest replay: no row of its own to apply again
			}
		default:
			return fmt.Errorf("claim %s/%s: %w", in.Namespace, in.EventID, err)
		}
		// Under log-only every delivery is applied, settled or not, as a
		// receiver without a ledger would.
		args := ApplyArgs{Namespace: in.Namespace, EventID: in.EventID, Force: c.logOnly}
		if _, err := c.jobs.InsertTx(ctx, tx.Tx, args, nil); err != nil {
			return fmt.Errorf("enqueue apply of %s/%s: %w", in.Namespace, in.EventID, err)
		}
		return nil
	})
	return claimed, err
}

// hasRow reports whether the ledger holds in's own key (a duplicate on the
// body digest alone has none).
func hasRow(ctx context.Context, tx *Tx, in Claim) (bool, error) {
	if in.BodyDigest == "" {
		return true, nil
	}
	ok, err := tx.Ent.WebhookEvent.Query().
		Where(webhookevent.Namespace(in.Namespace), webhookevent.EventID(in.EventID)).Exist(ctx)
	if err != nil {
		return false, fmt.Errorf("look up %s/%s: %w", in.Namespace, in.EventID, err)
	}
	return ok, nil
}
