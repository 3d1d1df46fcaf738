package admin

import (
	"net/netip"
	"sync"
	"time"
)

// Throttle defaults: ThrottleBurst failed authentications from one client
// are answered 401 at once; after that the client gets one more try every
// ThrottleEvery, and 429 with Retry-After until then. ThrottleClients
// bounds the clients tracked at once.
const (
	ThrottleBurst   = 20
	ThrottleEvery   = 3 * time.Second
	ThrottleClients = 16384
)

// Throttle limits failed authentications per client address with a token
// bucket: each client starts with burst tries to spend and earns one back
// every interval. A try is taken before the client's credentials are
// compared and given back when they are right, so only failures are spent
// and a client that never fails is never throttled; taking it first means
// concurrent requests cannot all slip through on the last try. A client
// with no try left is refused before its credentials are compared, the
// right ones included: answering the right token while refusing wrong ones
// would tell a guesser when it is right, and so would not slow guessing.
//
// IPv6 clients are grouped by /64, the block one subscriber holds. Memory
// is bounded: at most maxClients addresses are tracked, a client is
// forgotten once its bucket is full again, and while the table is full of
// clients that failed recently, the clients it has no room for share one
// bucket. Nothing runs in the background: buckets are refilled when read.
type Throttle struct {
	burst      float64
	every      time.Duration
	maxClients int
	now        func() time.Time

	mu       sync.Mutex
	clients  map[netip.Addr]*bucket
	overflow bucket
	// swept is when the table was last cleared of full buckets.
	swept time.Time
}

// bucket is one client's tries left, as of at.
type bucket struct {
	left float64
	at   time.Time
}

// NewThrottle returns a throttle with the defaults.
func NewThrottle() *Throttle {
	return &Throttle{
		burst: ThrottleBurst, every: ThrottleEvery, maxClients: ThrottleClients, now: time.Now,
		clients: map[netip.Addr]*bucket{},
	}
}

// Take takes one try of addr's before its credentials are compared: wait
// is 0 when it got one (last: it was the last one), else how long addr
// must wait for its next. Give the try back with Refund when the
// credentials are right.
func (t *Throttle) Take(addr netip.Addr) (wait time.Duration, last bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketOf(clientKey(addr), now)
	if b.left < 1 {
		return time.Duration((1 - b.left) * float64(t.every)), false
	}
	b.left--
	return 0, b.left < 1
}

// Refund gives back the try Take took for credentials that were right.
func (t *Throttle) Refund(addr netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b, ok := t.clients[clientKey(addr)]
	switch {
	case ok:
	case len(t.clients) >= t.maxClients:
		b = &t.overflow
	default:
		return // forgotten already: as good as full
	}
	t.refill(b, now)
	b.left = min(t.burst, b.left+1)
}

// bucketOf is the refilled bucket of key: its own, a new full one, or,
// when the table has no room for it, the shared one.
func (t *Throttle) bucketOf(key netip.Addr, now time.Time) *bucket {
	b, ok := t.clients[key]
	if !ok && len(t.clients) >= t.maxClients {
		t.sweep(now)
	}
	switch {
	case ok:
	case len(t.clients) < t.maxClients:
		b = &bucket{left: t.burst, at: now}
		t.clients[key] = b
	default:
		b = &t.overflow
	}
	t.refill(b, now)
	return b
}

// refill adds the tries b has earned back since it was last read.
func (t *Throttle) refill(b *bucket, now time.Time) {
	if b.at.IsZero() {
		b.left, b.at = t.burst, now
		return
	}
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.left = min(t.burst, b.left+float64(elapsed)/float64(t.every))
		b.at = now
	}
}

// sweep forgets the clients whose buckets are full again: they are as if
// never seen. It runs at most once per interval, since no bucket refills
// faster, so a full table costs one pass per interval and not one per
// request.
func (t *Throttle) sweep(now time.Time) {
	if !t.swept.IsZero() && now.Sub(t.swept) < t.every {
		return
	}
	t.swept = now
	for k, b := range t.clients {
		if t.refill(b, now); b.left >= t.burst {
			delete(t.clients, k)
		}
	}
}

// clientKey is the bucket addr spends from: its IPv4 address, or its
// IPv6 /64. An address that did not parse (the zero Addr) has one bucket
// of its own kind.
func clientKey(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return addr
}
