package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/modules/core/provider"
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
// event type), the Writes their handlers stage (NewWrite), and the River
// workers and periodic jobs of their own job kinds. Register everything
// before NewRiver; it only reads the registry, and a registration that
// went wrong (a kind registered twice, a malformed pattern, a Write's key
// it cannot order) makes it fail, so the process does not start.
type Registry struct {
	exact    map[string][]handler
	families []family
	// writes names the modules' Writes in the order they flush
	// (NewWrite).
	writes   []string
	workers  []func(*river.Workers) error
	periodic []*river.PeriodicJob
	// erasers are the modules' EraseFuncs, in registration order.
	erasers []eraser
	// preparers are the modules' PrepareFuncs (Prepare).
	preparers []preparer
	// settleArgs caches patterns' lists as the settle statement's
	// arguments: every apply sends them, and the registrations do not
	// change once the workers run. Handle drops it.
	settleArgs atomic.Pointer[[]any]
	errs       []error
}

type family struct {
	provider, prefix string
	handler
}

// handler is a registered HandlerFunc and the name failures report it by.
type handler struct {
	fn HandlerFunc
	// module is the package that registered it ("payment"); name adds the
	// function ("payment.stripeChargeRefunded").
	module, name string
}

// newHandler is fn, named after its package and function as the runtime
// knows them.
func newHandler(fn HandlerFunc) handler {
	return namedHandler(fn, fn)
}

// namedHandler is fn, named after the module's function named (fn itself,
// or the typed function On wraps in fn).
func namedHandler(fn HandlerFunc, named any) handler {
	module, name := funcName(named)
	return handler{fn: fn, module: module, name: name}
}

// funcName names a module's function fn after its package and its name:
// "github.com/x/modules/features/payment.(*Module).stripeChargeRefunded-fm"
// is module "payment", name "payment.stripeChargeRefunded".
func funcName(fn any) (module, name string) {
	full := "handler"
	if f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()); f != nil {
		full = f.Name()
	}
	return splitFuncName(full)
}

// splitFuncName names a function after its package and its name, from
// the name the runtime knows it by (funcName).
func splitFuncName(full string) (module, name string) {
	full = full[strings.LastIndexByte(full, '/')+1:]
	module, fn_, _ := strings.Cut(full, ".")
	fn_ = strings.TrimSuffix(fn_, "-fm")
	if i := strings.LastIndex(fn_, ")."); i >= 0 {
		fn_ = fn_[i+2:]
	}
	return module, module + "." + fn_
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{exact: map[string][]handler{}}
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

// EraseFunc erases a subject from a module's own tables: in namespace
// (every namespace when empty), it deletes or redacts each row that holds
// subject (a customer id), in tx, and returns how many rows it changed.
// hookledger erase runs every module's EraseFunc in one transaction
// (Store.EraseModules) and rolls it back when dryRun is set, so a function
// whose every change goes through tx gives the dry run's count by making
// the change; one that acts outside the database must not act when dryRun
// is set. A row it keeps must keep what guards it against a late event
// (its version): the ledger answers a redelivery of an erased event as a
// duplicate, but an older event delivered for the first time is applied.
type EraseFunc func(ctx context.Context, tx *Tx, subject, namespace string, dryRun bool) (int64, error)

// eraser is a registered EraseFunc and the module it erases rows of.
type eraser struct {
	fn     EraseFunc
	module string
}

// Erase registers a module's EraseFunc, named after the module that
// registers it, as Handle names handlers.
func (r *Registry) Erase(fn EraseFunc) {
	module, _ := funcName(fn)
	r.erasers = append(r.erasers, eraser{fn: fn, module: module})
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
	r.handle(provider, pattern, newHandler(fn))
}

// On registers fn for providerName's events of type pattern, as Handle does,
// and gives it the payload's members that T's field tags name, decoded
// (provider.FieldsOf: `field:"data.object.id,required"`). A payload that
// does not decode into T, or lacks a member tagged required, fails its
// event for good (Permanent) with an error naming the type and the
// member; fn sees only events it can read.
func On[T any](r *Registry, providerName, pattern string, fn func(ctx context.Context, tx *Tx, ev *Event, fields T) error) {
	read := provider.FieldsOf[T]()
	r.handle(providerName, pattern, namedHandler(func(ctx context.Context, tx *Tx, ev *Event) error {
		fields, err := read.Read(ev.Payload)
		if err != nil {
			return Permanent(fmt.Errorf("%s %s: %w", ev.Provider, ev.Type, err))
		}
		return fn(ctx, tx, ev, fields)
	}, fn))
}

// handle registers h for provider's events of type pattern.
func (r *Registry) handle(provider, pattern string, h handler) {
	r.settleArgs.Store(nil)
	prefix, isFamily, err := typePattern("handler", provider, pattern)
	switch {
	case err != nil:
		r.errs = append(r.errs, err)
	case isFamily:
		r.families = append(r.families, family{provider, prefix, h})
	default:
		k := provider + "\x00" + pattern
		r.exact[k] = append(r.exact[k], h)
	}
}

// typePattern reads a registration's event type pattern: an exact type,
// "*" (every type) or a family "prefix.*", whose prefix (with its dot) it
// returns; what names a handler or preparer for its error.
func typePattern(what, provider, pattern string) (prefix string, family bool, err error) {
	switch {
	case pattern == "*":
		return "", true, nil
	case strings.HasSuffix(pattern, ".*"):
		return strings.TrimSuffix(pattern, "*"), true, nil
	case strings.Contains(pattern, "*"):
		return "", false, fmt.Errorf("%s of %s events %q: a wildcard only stands at the end, after a dot", what, provider, pattern)
	}
	return pattern, false, nil
}

// Handlers returns the handlers of provider's eventType: exact matches
// first, then families, in registration order.
func (r *Registry) Handlers(provider, eventType string) []HandlerFunc {
	hs := r.handlers(provider, eventType)
	fns := make([]HandlerFunc, len(hs))
	for i, h := range hs {
		fns[i] = h.fn
	}
	return fns
}

// Modules returns the modules whose handlers apply provider's eventType,
// in the order they run, each once.
func (r *Registry) Modules(provider, eventType string) []string {
	var ms []string
	for _, h := range r.handlers(provider, eventType) {
		if !slices.Contains(ms, h.module) {
			ms = append(ms, h.module)
		}
	}
	return ms
}

func (r *Registry) handlers(provider, eventType string) []handler {
	hs := append([]handler(nil), r.exact[provider+"\x00"+eventType]...)
	for _, f := range r.families {
		if f.provider == provider && strings.HasPrefix(eventType, f.prefix) {
			hs = append(hs, f.handler)
		}
	}
	return hs
}

// patterns returns every registration as the five parallel lists the
// apply's settle statement takes (handlersSQL), which records the modules
// that apply each row: provider, the exact type or a family's prefix,
// whether it is a family, the module, and its rank in registration order.
func (r *Registry) patterns() []any {
	if args := r.settleArgs.Load(); args != nil {
		return *args
	}
	var (
		providers, patterns, modules []string
		family                       []bool
		ranks                        []int32
	)
	add := func(provider, pattern string, fam bool, module string) {
		providers, patterns, family, modules = append(providers, provider), append(patterns, pattern), append(family, fam), append(modules, module)
		ranks = append(ranks, int32(len(ranks)))
	}
	for _, k := range slices.Sorted(maps.Keys(r.exact)) {
		provider, pattern, _ := strings.Cut(k, "\x00")
		for _, h := range r.exact[k] {
			add(provider, pattern, false, h.module)
		}
	}
	for _, f := range r.families {
		add(f.provider, f.prefix, true, f.module)
	}
	args := []any{providers, patterns, family, modules, ranks}
	r.settleArgs.Store(&args)
	return args
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
