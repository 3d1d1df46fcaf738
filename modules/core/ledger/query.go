package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/predicate"
	"github.com/hookledger/hookledger/ent/webhookevent"
)

// Filter selects ledger rows. Type may end in ".*" for a family.
type Filter struct {
	Namespace string
	// EventID selects the rows of one event id, in every namespace.
	EventID string
	Status  webhookevent.Status
	Source  string
	Type    string
	Since   time.Time
	Until   time.Time
	// After is a keyset cursor: rows older than this id.
	After int64
	Limit int
}

func (f Filter) predicates() []predicate.WebhookEvent {
	var ps []predicate.WebhookEvent
	if f.Namespace != "" {
		ps = append(ps, webhookevent.Namespace(f.Namespace))
	}
	if f.EventID != "" {
		ps = append(ps, webhookevent.EventID(f.EventID))
	}
	if f.Status != "" {
		ps = append(ps, webhookevent.StatusEQ(f.Status))
	}
	if f.Source != "" {
		ps = append(ps, webhookevent.Source(f.Source))
	}
	if prefix, ok := strings.CutSuffix(f.Type, "*"); ok {
		ps = append(ps, webhookevent.EventTypeHasPrefix(prefix))
	} else if f.Type != "" {
		ps = append(ps, webhookevent.EventType(f.Type))
	}
	if !f.Since.IsZero() {
		ps = append(ps, webhookevent.ReceivedAtGTE(f.Since))
	}
	if !f.Until.IsZero() {
		ps = append(ps, webhookevent.ReceivedAtLT(f.Until))
	}
	if f.After > 0 {
		ps = append(ps, webhookevent.IDLT(f.After))
	}
	return ps
}

// ValidStatus reports whether s is a ledger status.
func ValidStatus(s webhookevent.Status) bool {
	return webhookevent.StatusValidator(s) == nil
}

// List returns matching rows newest first, and the cursor of the next page
// (0 on the last page).
func (s *Store) List(ctx context.Context, f Filter) ([]*ent.WebhookEvent, int64, error) {
	limit := min(max(f.Limit, 1), 500)
	rows, err := s.ent.WebhookEvent.Query().
		Where(f.predicates()...).
		Order(webhookevent.ByID(entsql.OrderDesc())).
		Limit(limit + 1).
		All(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list events: %w", err)
	}
	var next int64
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	return rows, next, nil
}

// ErrAmbiguous is returned when an event id exists in several namespaces.
var ErrAmbiguous = errors.New("event id exists in several namespaces")

// ErrNotFound is returned for an unknown event.
var ErrNotFound = errors.New("event not found")

// Find returns the row of eventID, in namespace when given.
func (s *Store) Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error) {
	q := s.ent.WebhookEvent.Query().Where(webhookevent.EventID(eventID))
	if namespace != "" {
		q = q.Where(webhookevent.Namespace(namespace))
	}
	rows, err := q.Limit(10).All(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("find %s: %w", eventID, err)
	case len(rows) == 0:
		return nil, ErrNotFound
	case len(rows) > 1:
		return nil, fmt.Errorf("%w: pass a namespace (%s)", ErrAmbiguous, namespaces(rows))
	}
	// The payload as delivered: a sealed one opened (PAYLOAD_KEYS).
	r := rows[0]
	p, err := s.sealer.Open(EventKey{Namespace: r.Namespace, EventID: r.EventID}, []byte(r.Payload))
	if err != nil {
		return nil, err
	}
	r.Payload = string(p)
	return r, nil
}

func namespaces(rows []*ent.WebhookEvent) string {
	ns := make([]string, len(rows))
	for i, r := range rows {
		ns[i] = r.Namespace
	}
	return strings.Join(ns, ", ")
}

// Job is the newest apply job of an event, as River keeps it.
type Job struct {
	ID          int64  `json:"id"`
	Kind        string `json:"kind"`
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// ScheduledAt is when River runs it next, for a job that waits
	// (available, scheduled, retryable); nil otherwise.
	ScheduledAt *time.Time `json:"scheduled_at"`
	Errors      []string   `json:"errors"`
}

// The apply jobs that carry event ($1 namespace, $2 event id): its own,
// and the batch it was claimed in (found through a GIN index on the
// batch's events).
const (
	ownApplyJob  = `kind = 'apply_event' AND args->>'namespace' = $1 AND args->>'event_id' = $2`
	batchHolding = `kind = 'apply_batch' AND args->'events' @> jsonb_build_array(jsonb_build_object('namespace', $1::text, 'event_id', $2::text))`
)

// FindJob returns the newest apply job of an event, its own or the batch
// it was claimed in, or nil when River no longer has one (it prunes
// finished jobs). Its errors are River's, each "attempt N at TIME: text".
func (s *Store) FindJob(ctx context.Context, namespace, eventID string) (*Job, error) {
	var (
		j         Job
		scheduled sql.NullTime
		errs      []byte
	)
	err := s.db.QueryRowContext(ctx, `
		SELECT id, kind, state, attempt, max_attempts,
			CASE WHEN state IN ('available', 'scheduled', 'retryable') THEN scheduled_at END,
			COALESCE(to_jsonb(errors), '[]'::jsonb)
		FROM river_job
		WHERE (`+ownApplyJob+`) OR (`+batchHolding+`)
		ORDER BY id DESC LIMIT 1`, namespace, eventID).Scan(&j.ID, &j.Kind, &j.State, &j.Attempt, &j.MaxAttempts, &scheduled, &errs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find apply job of %s/%s: %w", namespace, eventID, err)
	}
	if scheduled.Valid {
		at := scheduled.Time.UTC()
		j.ScheduledAt = &at
	}
	var attempts []rivertype.AttemptError
	if err := json.Unmarshal(errs, &attempts); err != nil {
		return nil, fmt.Errorf("read the errors of job %d: %w", j.ID, err)
	}
	j.Errors = make([]string, len(attempts))
	for i, a := range attempts {
		j.Errors[i] = fmt.Sprintf("attempt %d at %s: %s", a.Attempt, a.At.UTC().Format(time.RFC3339), a.Error)
	}
	return &j, nil
}
