package admin

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// Throttle defaults: ThrottleBurst wrong tokens from one client are
// answered 401; after that the client earns one more 401 every
// ThrottleEvery, and its other wrong tokens get 429 with Retry-After.
// ThrottleSlots is the fixed number of buckets clients are hashed into.
const (
	ThrottleBurst = 20
	ThrottleEvery = 3 * time.Second
	ThrottleSlots = 4096
)

// Throttle counts wrong tokens per client address with a token bucket:
// each client starts with burst failures to spend and earns one back every
// interval; a wrong token from a client with none left is answered 429.
// Only wrong tokens are counted, and only after they were compared: the
// right token is never throttled, whatever its client or anyone else sent
// before (an operator behind the same proxy as a guesser, or after a flood
// of guesses from a thousand networks, still gets in).
//
// IPv6 clients are grouped by /64, the block one subscriber holds. The
// buckets are a fixed array, and a client's bucket is chosen by a hash of
// its address keyed at start-up: memory is the same whatever clients
// come, there is no table for an attacker to fill, and nothing to evict.
// Clients whose addresses share a slot share its bucket; an attacker with
// many networks can drain every slot, which makes other clients' wrong
// tokens 429 sooner and nothing else. Nothing runs in the background:
// buckets are refilled when read.
type Throttle struct {
	burst float64
	every time.Duration
	now   func() time.Time
	seed  maphash.Seed

	mu    sync.Mutex
	slots []bucket
}

// bucket is the failures left to the clients of one slot, as of at.
type bucket struct {
	left float64
	at   time.Time
}

// NewThrottle returns a throttle with the defaults.
func NewThrottle() *Throttle {
	return &Throttle{
		burst: ThrottleBurst, every: ThrottleEvery, now: time.Now, seed: maphash.MakeSeed(),
		slots: make([]bucket, ThrottleSlots),
	}
}

// Fail counts a wrong token from addr. wait is 0 when addr had a failure
// left to spend (answer 401; last: it was the last one), else how long
// until it earns one back (answer 429 with Retry-After).
func (t *Throttle) Fail(addr netip.Addr) (wait time.Duration, last bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := &t.slots[t.slot(addr)]
	t.refill(b, t.now())
	if b.left < 1 {
		return time.Duration((1 - b.left) * float64(t.every)), false
	}
	b.left--
	return 0, b.left < 1
}

// slot is the bucket addr spends from: a keyed hash of its IPv4 address,
// or of its IPv6 /64. An address that did not parse (the zero Addr) has a
// slot too.
func (t *Throttle) slot(addr netip.Addr) int {
	key := clientKey(addr).As16()
	return int(maphash.Bytes(t.seed, key[:]) % uint64(len(t.slots)))
}

// refill adds the failures b has earned back since it was last read; a
// bucket never read is full.
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

// clientKey is the address a client is counted by: its IPv4 address, or
// its IPv6 /64.
func clientKey(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return addr
}
