package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

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
}

func (c Claim) key() EventKey { return EventKey{Namespace: c.Namespace, EventID: c.EventID} }

// Claimer claims events: the ledger row and the River job that applies it
// are inserted in one transaction, so a committed claim is always applied.
type Claimer struct {
	DB    *sql.DB
	River *river.Client[*sql.Tx]
	// LogOnly applies duplicates again (CLAIM_MODE=log-only).
	LogOnly bool
}

// Claim inserts the ledger row with INSERT ... ON CONFLICT DO NOTHING
// RETURNING and, when this call inserted it, the apply job. It returns
// true for a new event and false for a duplicate. A payload that jsonb
// would refuse is refused first (ErrUnstorable), with no database access.
func (c *Claimer) Claim(ctx context.Context, in Claim) (bool, error) {
	if err := CheckPayload(in.Payload); err != nil {
		return false, fmt.Errorf("claim %s/%s: %w", in.Namespace, in.EventID, err)
	}
	var claimed bool
	err := InTx(ctx, c.DB, func(tx *Tx) error {
		create := tx.Ent.WebhookEvent.Create().
			SetNamespace(in.Namespace).
			SetEventID(in.EventID).
			SetProvider(in.Provider).
			SetSource(in.Source).
			SetEventType(in.Type).
			SetPayload(in.Payload).
			SetHeaders(in.Headers).
			SetNillableSecretIndex(in.SecretIndex).
			SetReplayed(in.Replayed)
		if !in.OccurredAt.IsZero() {
			create.SetOccurredAt(in.OccurredAt)
		}
		if in.ClockSkew != nil {
			create.SetClockSkewMs(in.ClockSkew.Milliseconds())
		}
		_, err := create.
			OnConflictColumns(webhookevent.FieldNamespace, webhookevent.FieldEventID).
			DoNothing().
			ID(ctx)
		switch {
		case err == nil:
			claimed = true
		case errors.Is(err, sql.ErrNoRows):
			if !c.LogOnly {
				return nil
			}
		default:
			return fmt.Errorf("claim %s/%s: %w", in.Namespace, in.EventID, err)
		}
		// Under log-only every delivery is applied, settled or not, as a
		// receiver without a ledger would.
		args := ApplyArgs{Namespace: in.Namespace, EventID: in.EventID, Force: c.LogOnly}
		if _, err := c.River.InsertTx(ctx, tx.Tx, args, nil); err != nil {
			return fmt.Errorf("enqueue apply of %s/%s: %w", in.Namespace, in.EventID, err)
		}
		return nil
	})
	return claimed, err
}
