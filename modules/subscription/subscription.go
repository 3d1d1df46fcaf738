package subscription

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	entsub "github.com/hookledger/hookledger/ent/subscription"
	"github.com/hookledger/hookledger/modules/ledger"
	"github.com/hookledger/hookledger/modules/metrics"
	"github.com/hookledger/hookledger/modules/provider"
)

// Config holds the module's dependencies.
type Config struct {
	Metrics *metrics.Set
	// StripeAPI, when it has a key, resolves equal-version ties by
	// re-fetching the subscription from Stripe.
	StripeAPI StripeAPI
}

// StripeAPI reaches Stripe's REST API.
type StripeAPI struct {
	Base string // without /v1
	Key  string
	HTTP *http.Client
}

// Register adds the module's event handlers.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg}
	reg.Handle("stripe", "customer.subscription.*", m.applyStripe)
	reg.Handle("paddle", "subscription.*", m.applyPaddle)
}

type module struct{ cfg Config }

// State is one version of a subscription, ready to be written.
type State struct {
	Provider   string
	ExternalID string
	CustomerID string
	Plan       string
	Status     string
	Version    int64
	Rank       int
	EventID    string
}

// Written reports what Upsert did.
type Written int

// Upsert results.
const (
	Applied    Written = iota
	Stale              // the stored version was newer
	TieKept            // same version, stored precedence not lower
	TieApplied         // same version, higher precedence won
)

// Upsert writes s unless the stored row is newer: an insert, or an update
// guarded by version (and rank at an equal version), in one statement that
// also reports the version it found.
func Upsert(ctx context.Context, tx *ledger.Tx, s State) (Written, error) {
	var (
		written bool
		prev    sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, `
		WITH prev AS (SELECT version FROM subscription WHERE provider = $1 AND external_id = $2),
		up AS (
			INSERT INTO subscription AS s (provider, external_id, customer_id, plan, status, version, rank, event_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (provider, external_id) DO UPDATE
			SET customer_id = EXCLUDED.customer_id, plan = EXCLUDED.plan, status = EXCLUDED.status,
				version = EXCLUDED.version, rank = EXCLUDED.rank, event_id = EXCLUDED.event_id, updated_at = CURRENT_TIMESTAMP
			WHERE s.version < EXCLUDED.version OR (s.version = EXCLUDED.version AND s.rank < EXCLUDED.rank)
			RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM up), (SELECT version FROM prev)`,
		s.Provider, s.ExternalID, s.CustomerID, s.Plan, s.Status, s.Version, s.Rank, s.EventID,
	).Scan(&written, &prev)
	if err != nil {
		return 0, fmt.Errorf("upsert subscription %s/%s: %w", s.Provider, s.ExternalID, err)
	}
	tie := prev.Valid && prev.Int64 == s.Version
	switch {
	case written && tie:
		return TieApplied, nil
	case written:
		return Applied, nil
	case tie:
		return TieKept, nil
	default:
		return Stale, nil
	}
}

// stripeEvent is the part of a Stripe customer.subscription.* event used.
type stripeEvent struct {
	Created int64 `json:"created"`
	Data    struct {
		Object struct {
			ID       string          `json:"id"`
			Customer json.RawMessage `json:"customer"`
			Status   string          `json:"status"`
			Items    struct {
				Data []struct {
					Price struct {
						ID string `json:"id"`
					} `json:"price"`
					Plan struct {
						ID string `json:"id"`
					} `json:"plan"`
				} `json:"data"`
			} `json:"items"`
		} `json:"object"`
	} `json:"data"`
}

func (m *module) applyStripe(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	var se stripeEvent
	if err := json.Unmarshal(ev.Payload, &se); err != nil {
		return ledger.Permanent(fmt.Errorf("decode subscription event: %w", err))
	}
	obj := se.Data.Object
	if obj.ID == "" || se.Created <= 0 {
		return ledger.Permanent(errors.New("subscription event without data.object.id or created"))
	}
	status := obj.Status
	if ev.Type == "customer.subscription.deleted" {
		status = "canceled"
	}
	plan := ""
	if len(obj.Items.Data) > 0 {
		plan = obj.Items.Data[0].Price.ID
		if plan == "" {
			plan = obj.Items.Data[0].Plan.ID
		}
	}
	s := State{
		Provider:   "stripe",
		ExternalID: obj.ID,
		CustomerID: provider.StripeID(obj.Customer),
		Plan:       plan,
		Status:     status,
		Version:    se.Created,
		Rank:       Rank(status, ev.Type),
		EventID:    ev.EventID,
	}
	w, err := Upsert(ctx, tx, s)
	if err != nil {
		return err
	}
	if (w == TieKept || w == TieApplied) && m.cfg.StripeAPI.Key != "" {
		return m.refetch(ctx, tx, s)
	}
	m.count(w)
	return nil
}

// refetchRank ranks a state read from Stripe's API above any event of the
// same second.
const refetchRank = 1_000_000

// refetch resolves a tie with the truth: Stripe's current state of the
// subscription, written at the tied version, so that a later event still
// moves it forward.
func (m *module) refetch(ctx context.Context, tx *ledger.Tx, s State) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.StripeAPI.Base+"/v1/subscriptions/"+url.PathEscape(s.ExternalID), nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(m.cfg.StripeAPI.Key, "")
	hc := m.cfg.StripeAPI.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("re-fetch subscription %s: %w", s.ExternalID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("re-fetch subscription %s: Stripe answered %s", s.ExternalID, resp.Status)
	}
	var obj struct {
		Customer json.RawMessage `json:"customer"`
		Status   string          `json:"status"`
		Items    struct {
			Data []struct {
				Price struct {
					ID string `json:"id"`
				} `json:"price"`
			} `json:"data"`
		} `json:"items"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&obj); err != nil {
		return fmt.Errorf("re-fetch subscription %s: %w", s.ExternalID, err)
	}
	plan := s.Plan
	if len(obj.Items.Data) > 0 {
		plan = obj.Items.Data[0].Price.ID
	}
	_, err = tx.ExecContext(ctx, `
		UPDATE subscription SET status = $4, plan = $5, customer_id = COALESCE(NULLIF($6, ''), customer_id),
			rank = $7, event_id = $8, updated_at = CURRENT_TIMESTAMP
		WHERE provider = $1 AND external_id = $2 AND version = $3`,
		s.Provider, s.ExternalID, s.Version, obj.Status, plan, provider.StripeID(obj.Customer), refetchRank, s.EventID)
	if err != nil {
		return fmt.Errorf("write re-fetched subscription %s: %w", s.ExternalID, err)
	}
	m.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "refetched").Inc()
	return nil
}

// paddleEvent is the part of a Paddle Billing subscription.* event used.
type paddleEvent struct {
	OccurredAt time.Time `json:"occurred_at"`
	Data       struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		CustomerID string `json:"customer_id"`
		Items      []struct {
			Price struct {
				ID string `json:"id"`
			} `json:"price"`
		} `json:"items"`
	} `json:"data"`
}

// applyPaddle writes a Paddle subscription; its version is the event's
// occurred_at in Unix microseconds.
func (m *module) applyPaddle(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	var pe paddleEvent
	if err := json.Unmarshal(ev.Payload, &pe); err != nil {
		return ledger.Permanent(fmt.Errorf("decode paddle subscription event: %w", err))
	}
	if pe.Data.ID == "" || pe.OccurredAt.IsZero() {
		return ledger.Permanent(errors.New("paddle subscription event without data.id or occurred_at"))
	}
	plan := ""
	if len(pe.Data.Items) > 0 {
		plan = pe.Data.Items[0].Price.ID
	}
	w, err := Upsert(ctx, tx, State{
		Provider:   "paddle",
		ExternalID: pe.Data.ID,
		CustomerID: pe.Data.CustomerID,
		Plan:       plan,
		Status:     pe.Data.Status,
		Version:    pe.OccurredAt.UnixMicro(),
		Rank:       Rank(pe.Data.Status, ev.Type),
		EventID:    ev.EventID,
	})
	if err != nil {
		return err
	}
	m.count(w)
	return nil
}

func (m *module) count(w Written) {
	switch w {
	case Stale:
		m.cfg.Metrics.StaleSkipped.WithLabelValues(entsub.Table).Inc()
	case TieKept:
		m.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "kept").Inc()
	case TieApplied:
		m.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "applied").Inc()
	}
}

// statusRank orders statuses along the subscription lifecycle; terminal
// statuses rank highest.
var statusRank = map[string]int{
	"incomplete":         1,
	"trialing":           2,
	"active":             3,
	"past_due":           4,
	"unpaid":             5,
	"paused":             5,
	"canceled":           9,
	"incomplete_expired": 9,
}

// Rank is the precedence of a state at an equal version: lifecycle first,
// then the event type (created < updated < deleted).
func Rank(status, eventType string) int {
	typeRank := 0
	switch {
	case strings.HasSuffix(eventType, ".updated"):
		typeRank = 1
	case strings.HasSuffix(eventType, ".deleted"), strings.HasSuffix(eventType, ".canceled"):
		typeRank = 2
	}
	return statusRank[status]*10 + typeRank
}
