package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Event is a claimed ledger row as a handler sees it.
type Event struct {
	Namespace  string
	EventID    string
	Provider   string
	Source     string
	Type       string
	Payload    json.RawMessage
	OccurredAt time.Time
	Replayed   bool
	// Forced is true when a settled event is applied again on purpose
	// (requeue --force, or a duplicate under CLAIM_MODE=log-only).
	Forced bool
}

// HandlerFunc applies one event to business state inside the apply
// transaction. Returning an error rolls the whole apply back; wrap it with
// Permanent when retrying cannot help.
type HandlerFunc func(ctx context.Context, tx *Tx, ev *Event) error

// Registry is what modules register into: event handlers by (provider,
// event type), River workers for their own job kinds, and, once the River
// client exists, the way to insert those jobs inside the apply transaction.
// Register everything before the workers start; it is read-only after.
type Registry struct {
	exact    map[string][]HandlerFunc
	families []family
	workers  *river.Workers
	periodic []*river.PeriodicJob
	jobs     JobInserter
}

// JobInserter inserts River jobs inside a transaction; *river.Client is one.
type JobInserter interface {
	InsertTx(ctx context.Context, tx *sql.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertManyTx(ctx context.Context, tx *sql.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

type family struct {
	provider, prefix string
	fn               HandlerFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{exact: map[string][]HandlerFunc{}, workers: river.NewWorkers()}
}

// Workers is where modules add the workers of their own job kinds.
func (r *Registry) Workers() *river.Workers { return r.workers }

// AddPeriodic schedules a job of a module's own; River runs periodic jobs
// on the elected leader only.
func (r *Registry) AddPeriodic(j *river.PeriodicJob) { r.periodic = append(r.periodic, j) }

// BindJobs sets the inserter InsertTx uses; NewRiver binds its client.
func (r *Registry) BindJobs(j JobInserter) { r.jobs = j }

func (r *Registry) insertMany(ctx context.Context, tx *Tx, params []river.InsertManyParams) error {
	if r.jobs == nil {
		return errors.New("ledger: registry has no River client bound")
	}
	if _, err := r.jobs.InsertManyTx(ctx, tx.Tx, params); err != nil {
		return fmt.Errorf("insert %d jobs: %w", len(params), err)
	}
	return nil
}

// InsertTx inserts a job in tx, so that it commits, or not, with the apply.
func (r *Registry) InsertTx(ctx context.Context, tx *Tx, args river.JobArgs, opts *river.InsertOpts) error {
	if r.jobs == nil {
		return errors.New("ledger: registry has no River client bound")
	}
	if _, err := r.jobs.InsertTx(ctx, tx.Tx, args, opts); err != nil {
		return fmt.Errorf("insert %s job: %w", args.Kind(), err)
	}
	return nil
}

// Handle registers fn for provider's events of type pattern. A pattern
// ending in ".*" matches a family ("customer.subscription.*"); "*" alone
// matches every type of the provider. Several handlers of one type run in
// registration order, in one transaction.
func (r *Registry) Handle(provider, pattern string, fn HandlerFunc) {
	switch {
	case pattern == "*":
		r.families = append(r.families, family{provider, "", fn})
	case strings.HasSuffix(pattern, ".*"):
		r.families = append(r.families, family{provider, strings.TrimSuffix(pattern, "*"), fn})
	case strings.Contains(pattern, "*"):
		panic(fmt.Sprintf("ledger: pattern %q: a wildcard only stands at the end, after a dot", pattern))
	default:
		k := provider + "\x00" + pattern
		r.exact[k] = append(r.exact[k], fn)
	}
}

// Handlers returns the handlers of provider's eventType: exact matches
// first, then families, in registration order.
func (r *Registry) Handlers(provider, eventType string) []HandlerFunc {
	hs := append([]HandlerFunc(nil), r.exact[provider+"\x00"+eventType]...)
	for _, f := range r.families {
		if f.provider == provider && strings.HasPrefix(eventType, f.prefix) {
			hs = append(hs, f.fn)
		}
	}
	return hs
}

// LabelType is the metric label of an event type: the type when a handler
// is registered for it exactly, the pattern of the family that matches it,
// else "other". Types come from senders; labels must stay a bounded set.
func (r *Registry) LabelType(provider, eventType string) string {
	if len(r.exact[provider+"\x00"+eventType]) > 0 {
		return eventType
	}
	for _, f := range r.families {
		if f.provider == provider && strings.HasPrefix(eventType, f.prefix) {
			return f.prefix + "*"
		}
	}
	return "other"
}
