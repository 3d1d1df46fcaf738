package subscription

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/riverqueue/river"

	entsub "github.com/hookledger/hookledger/ent/subscription"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// RefetchArgs is the subscription_refetch job: resolve a same-second tie of
// a Stripe subscription with Stripe's current state of it. The apply that
// saw the tie inserts it in its own transaction, so the API call never runs
// while the ledger row is locked, and a call that fails retries on its own.
type RefetchArgs struct {
	Namespace      string `json:"namespace"`
	SubscriptionID string `json:"subscription_id"`
	// Version is the tied version: the re-fetched state is written at it,
	// and only while the row is still there, so a later event still wins.
	Version int64  `json:"version"`
	EventID string `json:"event_id"`
}

// Kind names the job in River.
func (RefetchArgs) Kind() string { return "subscription_refetch" }

// InsertOpts keeps one pending re-fetch per tie.
func (RefetchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 20, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// refetchRank ranks a state read from Stripe's API above any event of the
// same second.
const refetchRank = 1_000_000

type refetchWorker struct {
	river.WorkerDefaults[RefetchArgs]
	cfg Config
}

// errNotFound is Stripe's answer for a subscription it does not have.
var errNotFound = errors.New("not found")

// Work reads the subscription from Stripe and writes it at the tied
// version; a customer erased since (erased_subject) is written redacted,
// never from Stripe's copy. Stripe unreachable or failing retries with backoff; an answer
// that no retry can change (404, a refused key) ends the job at once, and
// the tie rule's result stands.
func (w *refetchWorker) Work(ctx context.Context, job *river.Job[RefetchArgs]) error {
	a := job.Args
	obj, err := w.fetch(ctx, a.SubscriptionID)
	var refused *provider.APIRefusal
	switch {
	case errors.As(err, &refused):
		w.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "refetch_refused").Inc()
		return river.JobCancel(fmt.Errorf("re-fetch subscription %s: %w; the tie rule's state stands", a.SubscriptionID, err))
	case err != nil:
		return fmt.Errorf("re-fetch subscription %s: %w", a.SubscriptionID, err)
	}
	var plan *string
	if p := obj.plan(); p != "" {
		plan = &p
	}
	err = ledger.InTx(ctx, w.cfg.DB, func(tx *ledger.Tx) error {
		_, err := tx.ExecContext(ctx, `
			UPDATE subscription SET status = $5, plan = COALESCE($6, plan),
				customer_id = COALESCE(NULLIF(`+ledger.RedactErasedSQL("$1", "$7::text")+`, ''), customer_id),
				rank = $8, event_id = $9, updated_at = CURRENT_TIMESTAMP
			WHERE namespace = $1 AND provider = $2 AND external_id = $3 AND version = $4`,
			a.Namespace, "stripe", a.SubscriptionID, a.Version, obj.Status, plan, provider.StripeID(obj.Customer), refetchRank, a.EventID)
		return err
	})
	if err != nil {
		return fmt.Errorf("write re-fetched subscription %s: %w", a.SubscriptionID, err)
	}
	w.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "refetched").Inc()
	return nil
}

// NextRetry backs off like an apply.
func (w *refetchWorker) NextRetry(job *river.Job[RefetchArgs]) time.Time {
	return time.Now().Add(ledger.RetryDelay(job.Attempt))
}

func (w *refetchWorker) fetch(ctx context.Context, id string) (*stripeSubscription, error) {
	var obj stripeSubscription
	if err := w.cfg.StripeAPI.Get(ctx, "/v1/subscriptions/"+url.PathEscape(id), "", &obj); err != nil {
		return nil, err
	}
	if obj.Status == "" {
		return nil, &provider.APIRefusal{Status: "a subscription without a status"}
	}
	return &obj, nil
}
