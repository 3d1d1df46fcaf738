package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"
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
// event type), and the River workers and periodic jobs of their own job
// kinds. Register everything before NewRiver; it only reads the registry,
// and a registration that went wrong (a kind registered twice, a malformed
// pattern) makes it fail, so the process does not start.
type Registry struct {
	exact    map[string][]HandlerFunc
	families []family
	workers  []func(*river.Workers) error
	periodic []*river.PeriodicJob
	errs     []error
}

type family struct {
	provider, prefix string
	fn               HandlerFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{exact: map[string][]HandlerFunc{}}
}

// AddWorker registers the worker of a module's own job kind. NewRiver adds
// it to its client's workers, after the ledger's own.
func AddWorker[T river.JobArgs](r *Registry, w river.Worker[T]) {
	r.workers = append(r.workers, func(ws *river.Workers) error {
		if err := river.AddWorkerSafely(ws, w); err != nil {
			return fmt.Errorf("register %T: %w", w, err)
		}
		return nil
	})
}

// AddPeriodic schedules a job of a module's own; River runs periodic jobs
// on the elected leader only.
func (r *Registry) AddPeriodic(j *river.PeriodicJob) { r.periodic = append(r.periodic, j) }

// addWorkers adds every registered worker to ws and returns what went
// wrong in the whole registration.
func (r *Registry) addWorkers(ws *river.Workers) error {
	errs := append([]error(nil), r.errs...)
	for _, add := range r.workers {
		errs = append(errs, add(ws))
	}
	return errors.Join(errs...)
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
		r.errs = append(r.errs, fmt.Errorf("handler of %s events %q: a wildcard only stands at the end, after a dot", provider, pattern))
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
