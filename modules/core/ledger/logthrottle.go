package ledger

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// LogThrottleInterval is how long a ThrottleHandler drops the repeats of a
// warning or an error after letting it through.
const LogThrottleInterval = 10 * time.Second

// ThrottleHandler is the slog.Handler that keeps a database outage from
// flooding hookledger's log through River and riverui: while PostgreSQL is
// unreachable, River's producer, elector and notifier retry many times a
// second and log the same error each time.
//
// Records at warn level and above are throttled by their level and message:
// the first passes, the repeats within the interval are dropped and
// counted, and the first repeat after the interval passes carrying the
// count as suppressed=N. A message that stops repeating is not lost: once
// its interval has ended, the next record of any message (or Flush) emits
// its last dropped record with suppressed=N. Debug and info records pass
// unthrottled and uncounted; they are River's lifecycle lines, off unless
// LOG_LEVEL asks for them.
//
// Handlers derived with WithAttrs and WithGroup share their parent's
// counts: a message is one key whichever logger of the client says it.
type ThrottleHandler struct {
	next  slog.Handler
	state *throttleState
}

// throttleKey is what makes two records repeats of one another.
type throttleKey struct {
	level slog.Level
	msg   string
}

// throttleWindow is one key's interval: when it ends, and the last record
// it dropped, with the handler that would have written it.
type throttleWindow struct {
	end        time.Time
	suppressed int
	last       slog.Record
	handler    slog.Handler
}

type throttleState struct {
	interval time.Duration
	nowFunc  func() time.Time

	mu      sync.Mutex
	windows map[throttleKey]*throttleWindow
	// sweepAt is the earliest end of a window: no window has ended before.
	sweepAt time.Time
}

// NewThrottleHandler throttles the warnings and errors passed to next,
// letting each through at most once per interval.
func NewThrottleHandler(next slog.Handler, interval time.Duration) *ThrottleHandler {
	return &ThrottleHandler{next: next, state: &throttleState{
		interval: interval,
		nowFunc:  time.Now,
		windows:  map[throttleKey]*throttleWindow{},
	}}
}

// Enabled reports whether the wrapped handler handles records at level.
func (h *ThrottleHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// WithAttrs returns a handler whose records carry attrs, counted with h's.
func (h *ThrottleHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &ThrottleHandler{next: h.next.WithAttrs(attrs), state: h.state}
}

// WithGroup returns a handler that qualifies attributes with name, counted
// with h's.
func (h *ThrottleHandler) WithGroup(name string) slog.Handler {
	return &ThrottleHandler{next: h.next.WithGroup(name), state: h.state}
}

// Handle passes r on, drops it as a repeat, or passes it with the count of
// the repeats dropped before it; first it emits the counts of the other
// messages whose intervals have ended.
func (h *ThrottleHandler) Handle(ctx context.Context, r slog.Record) error {
	s := h.state
	key := throttleKey{level: r.Level, msg: r.Message}
	throttled := r.Level >= slog.LevelWarn
	now := s.nowFunc()

	s.mu.Lock()
	ended := s.sweep(now, key)
	pass, suppressed := true, 0
	if throttled {
		w := s.windows[key]
		switch {
		case w == nil:
			s.open(key, now)
		case now.Before(w.end):
			w.suppressed++
			w.last, w.handler = r.Clone(), h.next
			pass = false
		default:
			suppressed = w.suppressed
			delete(s.windows, key)
			s.open(key, now)
		}
	}
	s.mu.Unlock()

	errs := []error{emit(ctx, ended)}
	if pass {
		if suppressed > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("suppressed", suppressed))
		}
		errs = append(errs, h.next.Handle(ctx, r))
	}
	return errors.Join(errs...)
}

// Flush emits the count of every message with repeats dropped since it
// last passed, and starts its count again; a process calls it as it stops.
func (h *ThrottleHandler) Flush(ctx context.Context) error {
	s := h.state
	s.mu.Lock()
	var pending []*throttleWindow
	for _, w := range s.windows {
		if w.suppressed > 0 {
			done := *w
			pending = append(pending, &done)
			w.suppressed, w.last, w.handler = 0, slog.Record{}, nil
		}
	}
	s.mu.Unlock()
	return emit(ctx, pending)
}

// open starts key's interval at now. Under s.mu.
func (s *throttleState) open(key throttleKey, now time.Time) {
	end := now.Add(s.interval)
	s.windows[key] = &throttleWindow{end: end}
	if s.sweepAt.IsZero() || end.Before(s.sweepAt) {
		s.sweepAt = end
	}
}

// sweep forgets the windows that ended by now, but keep's, and returns
// those that dropped records. Under s.mu.
func (s *throttleState) sweep(now time.Time, keep throttleKey) []*throttleWindow {
	if s.sweepAt.IsZero() || now.Before(s.sweepAt) {
		return nil
	}
	var ended []*throttleWindow
	s.sweepAt = time.Time{}
	for k, w := range s.windows {
		switch {
		case k == keep || now.Before(w.end):
			if s.sweepAt.IsZero() || w.end.Before(s.sweepAt) {
				s.sweepAt = w.end
			}
		default:
			if w.suppressed > 0 {
				ended = append(ended, w)
			}
			delete(s.windows, k)
		}
	}
	return ended
}

// emit writes each window's last dropped record with its count.
func emit(ctx context.Context, windows []*throttleWindow) error {
	var errs []error
	for _, w := range windows {
		r := w.last.Clone()
		r.AddAttrs(slog.Int("suppressed", w.suppressed))
		errs = append(errs, w.handler.Handle(ctx, r))
	}
	return errors.Join(errs...)
}
