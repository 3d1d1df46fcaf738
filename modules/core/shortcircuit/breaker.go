package shortcircuit

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// breakerSlots is how many slots a breaker's window is counted in.
const breakerSlots = 10

// breaker opens when, over its last window, at least minCalls calls gave a
// verdict and at least rate of them failed; open, it refuses calls for a
// pause. Then one probe call is let through at a time: a success closes it
// with a fresh window, a failure opens it again. The pause is openFor, and
// doubles, up to maxOpenFor, with each failed probe and each reopening
// within a window of closing: a burst of failures costs a short pause, a
// dead server a probe now and then. Verdicts of calls let through before
// it opened are not the probe's and change nothing.
type breaker struct {
	window     time.Duration
	minCalls   int
	rate       float64
	openFor    time.Duration
	maxOpenFor time.Duration
	now        func() time.Time
	gauge      prometheus.Gauge

	mu        sync.Mutex
	slots     [breakerSlots]slot
	open      bool
	openUntil time.Time
	pause     time.Duration // the last pause
	closedAt  time.Time
	probe     ticket // the probe in flight, or 0
	probes    ticket // the last probe's
}

// ticket is what allow hands a call, for its verdict: 0, or the probe's
// number while the breaker is open.
type ticket uint64

// slot counts the verdicts of one tenth of the window.
type slot struct {
	epoch      int64 // which tenth of time it counts, since the zero time
	ok, failed int
}

// allow reports whether a call may go to Redis now, and its ticket.
func (b *breaker) allow() (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return 0, true
	case b.now().Before(b.openUntil), b.probe != 0:
		return 0, false
	default:
		b.probes++
		b.probe = b.probes
		return b.probe, true
	}
}

// record tells the breaker how an allowed call went.
func (b *breaker) record(t ticket, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.open {
		if t == 0 || t != b.probe {
			return // a call from before the breaker opened
		}
		b.probe = 0
		if ok {
			b.open = false
			b.closedAt = now
			b.slots = [breakerSlots]slot{}
			b.gauge.Set(0)
		} else {
			b.pauseFrom(now, true)
		}
		return
	}
	s := b.slot(now)
	if ok {
		s.ok++
		return
	}
	s.failed++
	calls, failed := b.count(now)
	if calls >= b.minCalls && float64(failed) >= b.rate*float64(calls) {
		b.open = true
		b.pauseFrom(now, !b.closedAt.IsZero() && now.Sub(b.closedAt) < b.window)
		b.gauge.Set(1)
	}
}

// pauseFrom starts a pause at now: openFor, or twice the last one (at most
// maxOpenFor) when again is true.
func (b *breaker) pauseFrom(now time.Time, again bool) {
	if again && b.pause > 0 {
		b.pause = min(2*b.pause, max(b.maxOpenFor, b.openFor))
	} else {
		b.pause = b.openFor
	}
	b.openUntil = now.Add(b.pause)
}

// abandon ends an allowed call that gave no verdict (its caller went away,
// or it timed out before the longest timeout).
func (b *breaker) abandon(t ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t != 0 && t == b.probe {
		b.probe = 0
	}
}

// slot returns the slot counting now, emptied if it last counted an older
// tenth of the window.
func (b *breaker) slot(now time.Time) *slot {
	epoch := b.epoch(now)
	s := &b.slots[epoch%breakerSlots]
	if s.epoch != epoch {
		*s = slot{epoch: epoch}
	}
	return s
}

// count sums the verdicts of the window ending now.
func (b *breaker) count(now time.Time) (calls, failed int) {
	epoch := b.epoch(now)
	for _, s := range b.slots {
		if s.epoch > epoch-breakerSlots && s.epoch <= epoch {
			calls += s.ok + s.failed
			failed += s.failed
		}
	}
	return calls, failed
}

func (b *breaker) epoch(now time.Time) int64 {
	return now.UnixNano() / int64(b.window/breakerSlots)
}
