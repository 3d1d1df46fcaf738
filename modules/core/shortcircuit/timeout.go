package shortcircuit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the adaptive lookup timeout.
const (
	// DefaultMaxTimeout is the longest a lookup ever waits for Redis
	// (when REDIS_TIMEOUT is shorter): a Redis that is down or far too slow
	// costs a delivery at most this, and only until the breaker opens. On
	// a host whose run queue is several times its cores, lookups that
	// PostgreSQL would have answered in 100 ms or more take 50 to 100 ms.
	DefaultMaxTimeout = 100 * time.Millisecond
	// latencyWindow is how many recent lookups the timeout follows.
	latencyWindow = 1024
	// latencyWarm is how many lookups the timeout waits for before it
	// follows them; until then a lookup may take the ceiling.
	latencyWarm = 32
	// latencyQuantile is the share of recent lookups the timeout covers
	// before headroom.
	latencyQuantile = 0.99
	// headroom multiplies the quantile: a lookup as slow as the p99 is
	// still answered, and one that times out records a latency that
	// doubles the next timeout.
	headroom = 2
	// Latencies are counted in buckets a quarter of a power of two apart
	// (19%), from bucketBase up.
	bucketBase    = 50 * time.Microsecond
	bucketsPerTwo = 4
	buckets       = 64
)

// timeouts derives each lookup's timeout from the latencies of recent
// lookups: twice their p99, at least floor and at most ceiling. A lookup
// that timed out is recorded at the time it waited, a lower bound of its
// latency: when lookups keep timing out, each round of them doubles the
// timeout until it reaches the ceiling. Until latencyWarm lookups are
// known the timeout is the ceiling.
type timeouts struct {
	floor, ceiling time.Duration

	mu     sync.Mutex
	ring   [latencyWindow]uint8 // bucket of each recent lookup
	n      int                  // lookups in ring
	next   int                  // where the next one goes
	counts [buckets]int         // lookups in ring per bucket

	current atomic.Int64 // the timeout, as a time.Duration
}

func newTimeouts(floor, ceiling time.Duration) *timeouts {
	t := &timeouts{floor: floor, ceiling: max(ceiling, floor)}
	t.current.Store(int64(t.ceiling))
	return t
}

// timeout is the timeout of the next lookup.
func (t *timeouts) timeout() time.Duration { return time.Duration(t.current.Load()) }

// observe records how long a lookup took (or waited before timing out).
func (t *timeouts) observe(d time.Duration) {
	b := bucket(d)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == latencyWindow {
		t.counts[t.ring[t.next]]--
	} else {
		t.n++
	}
	t.ring[t.next] = b
	t.counts[b]++
	t.next = (t.next + 1) % latencyWindow
	if t.n < latencyWarm {
		return
	}
	// The p99 is the upper bound of the bucket where the count of faster
	// lookups reaches 99% of the window.
	want := int(math.Ceil(latencyQuantile * float64(t.n)))
	seen, i := 0, 0
	for ; i < buckets-1; i++ {
		if seen += t.counts[i]; seen >= want {
			break
		}
	}
	t.current.Store(int64(min(max(headroom*upper(i), t.floor), t.ceiling)))
}

// bucket is the bucket of latency d.
func bucket(d time.Duration) uint8 {
	if d <= bucketBase {
		return 0
	}
	i := int(math.Floor(bucketsPerTwo * math.Log2(float64(d)/float64(bucketBase))))
	return uint8(min(i, buckets-1))
}

// upper is the longest latency of bucket i.
func upper(i int) time.Duration {
	return time.Duration(float64(bucketBase) * math.Exp2(float64(i+1)/bucketsPerTwo))
}
