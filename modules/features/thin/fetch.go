package thin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// FetchArgs is the stripe_thin_fetch job: fetch the object a thin event
// names and apply it. It carries the ledger key only; the event is read
// back from the ledger.
type FetchArgs struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
}

// Kind names the job in River.
func (FetchArgs) Kind() string { return "stripe_thin_fetch" }

// InsertOpts gives the job the apply's patience with Stripe.
func (FetchArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 20} }

type fetchWorker struct {
	river.WorkerDefaults[FetchArgs]
	m *module
}

// NextRetry backs off like an apply.
func (w *fetchWorker) NextRetry(job *river.Job[FetchArgs]) time.Time {
	return time.Now().Add(ledger.RetryDelay(job.Attempt))
}

// Work fetches the related object, then, in one transaction, writes it
// through the snapshot type's handlers, unless the snapshot twin has
// reached the ledger meanwhile. Stripe unreachable or failing retries; an
// answer no retry changes (404, a refused key) or a handler's permanent
// error ends the job.
func (w *fetchWorker) Work(ctx context.Context, job *river.Job[FetchArgs]) error {
	a := job.Args
	row, err := w.m.ent.WebhookEvent.Query().Where(webhookevent.Namespace(a.Namespace), webhookevent.EventID(a.EventID)).Only(ctx)
	if ent.IsNotFound(err) {
		return river.JobCancel(fmt.Errorf("thin event %s/%s: %w", a.Namespace, a.EventID, ledger.ErrNotFound))
	}
	if err != nil {
		return fmt.Errorf("read thin event %s/%s: %w", a.Namespace, a.EventID, err)
	}
	te, err := decode([]byte(row.Payload))
	if err != nil {
		return river.JobCancel(err)
	}
	obj, err := object(ctx, w.m.cfg.API, te)
	var refused *provider.APIRefusal
	if errors.As(err, &refused) {
		return river.JobCancel(fmt.Errorf("thin event %s: %w", te.ID, err))
	}
	if err != nil {
		return fmt.Errorf("thin event %s: %w", te.ID, err)
	}
	payload, err := snapshot(te, obj)
	if err != nil {
		return river.JobCancel(err)
	}
	snap := snapshotType(te.Type)
	// The snapshot type's handlers insert their jobs (a payment's receipt)
	// in this transaction, through the client working this job.
	err = ledger.InTxWithJobs(ctx, w.m.cfg.DB, river.ClientFromContext[*sql.Tx](ctx), func(tx *ledger.Tx) error {
		if twin, err := twinInLedger(ctx, tx.Ent, a.Namespace, te.SnapshotEvent); err != nil || twin {
			return err
		}
		ev := &ledger.Event{Namespace: a.Namespace, EventID: te.ID, Provider: row.Provider, Source: row.Source,
			Type: snap, Payload: payload, OccurredAt: te.Created, Replayed: row.Replayed}
		for _, h := range w.m.reg.Handlers("stripe", snap) {
			if err := h(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if ledger.IsPermanent(err) {
		return river.JobCancel(fmt.Errorf("apply thin event %s as %s: %w", te.ID, snap, err))
	}
	return err
}

// object returns the thin event's related object as the API serves it,
// reading the event from GET /v2/core/events/{id} first when the delivery
// names none.
func object(ctx context.Context, api provider.StripeAPI, te event) (json.RawMessage, error) {
	rel := te.RelatedObject
	if rel == nil || rel.URL == "" {
		var full event
		if err := api.Get(ctx, "/v2/core/events/"+url.PathEscape(te.ID), te.Context, &full); err != nil {
			return nil, err
		}
		if rel = full.RelatedObject; rel == nil || rel.URL == "" {
			return nil, &provider.APIRefusal{Status: "an event without a related object"}
		}
	}
	if !strings.HasPrefix(rel.URL, "/v1/") || strings.ContainsAny(rel.URL, "?#") || strings.Contains(rel.URL, "..") {
		return nil, &provider.APIRefusal{Status: fmt.Sprintf("a related object URL that is not a v1 API path (%q)", rel.URL)}
	}
	var obj json.RawMessage
	if err := api.Get(ctx, rel.URL, te.Context, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}
