package shortcircuit

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// breaker opens after threshold consecutive failures and then refuses
// calls for openFor; after that one probe call is let through at a time,
// and the first success closes it again.
type breaker struct {
	threshold int
	openFor   time.Duration
	now       func() time.Time
	gauge     prometheus.Gauge

	mu        sync.Mutex
	failures  int
	openUntil time.Time
	probing   bool
}

// allow reports whether a call may go to Redis now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.failures < b.threshold:
		return true
	case b.now().Before(b.openUntil), b.probing:
		return false
	default:
		b.probing = true
		return true
	}
}

// record tells the breaker how an allowed call went.
func (b *breaker) record(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if ok {
		b.failures = 0
		b.gauge.Set(0)
		return
	}
	b.failures++
	if b.failures >= b.threshold {
		b.openUntil = b.now().Add(b.openFor)
		b.gauge.Set(1)
	}
}

// abandon ends an allowed call that gave no verdict (its caller went away).
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}
