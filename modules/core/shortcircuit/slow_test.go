package shortcircuit

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/redistest"
)

// delayProxy is a TCP proxy in front of a Redis that holds every reply for
// a delay the test sets: a Redis slowed down, as on a loaded host.
type delayProxy struct {
	URL   string
	delay atomic.Int64

	ln    net.Listener
	done  chan struct{}
	mu    sync.Mutex
	conns []net.Conn
}

// startDelayProxy proxies upstream (a redis:// URL) until the test ends.
func startDelayProxy(t *testing.T, upstream string) *delayProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := u.Host
	u.Host = ln.Addr().String()
	p := &delayProxy{URL: u.String(), ln: ln, done: make(chan struct{})}
	go p.accept(target)
	t.Cleanup(func() {
		close(p.done)
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *delayProxy) accept(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() {
			defer c.Close()
			defer up.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := up.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer c.Close()
			defer up.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 {
					select { // the slowness under test
					case <-time.After(time.Duration(p.delay.Load())):
					case <-p.done:
						return
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestSlowRedisStillShortCircuits: Redis answers fast, then (the host
// loaded) several times slower than the timeout it taught the Gate. A
// storm of duplicates sees the first lookups time out, the timeout follow
// the latency up within a few rounds, and the rest of the storm answered
// from Redis, with the breaker closed all along.
func TestSlowRedisStillShortCircuits(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	proxy := startDelayProxy(t, url)
	// The ceiling is generous: the test is about the timeout adapting, not
	// about how slow this machine may get.
	g, rdb := setup(t, proxy.URL, Options{Timeout: 2 * time.Millisecond, MaxTimeout: 5 * time.Second})
	ctx := context.Background()
	const events = 50
	for i := range events {
		require.NoError(t, rdb.Set(ctx, g.Key("stripe", fmt.Sprintf("evt_slow_%d", i)), "1", time.Minute).Err())
	}

	// A lookup the machine stalls past the 2 ms floor times out; asked
	// again, Redis without delay answers.
	for i := range 4 * latencyWarm {
		key := fmt.Sprintf("evt_slow_%d", i%events)
		answered := false
		for range 20 {
			if answered = g.Seen(ctx, "stripe", "stripe", key); answered {
				break
			}
		}
		require.True(t, answered, "Redis without delay answers")
	}
	warmTimeouts := testutil.ToFloat64(g.errs.WithLabelValues("lookup"))
	learned := g.timeouts.timeout()
	require.Less(t, learned, time.Second, "the timeout followed the fast lookups down")

	delay := max(4*learned, 20*time.Millisecond)
	proxy.delay.Store(int64(delay))
	const clients, each = 8, 100
	var hits atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if g.Seen(ctx, "stripe", "stripe", fmt.Sprintf("evt_slow_%d", (c*each+i)%events)) {
					hits.Add(1)
				}
			}
		}()
	}
	wg.Wait()

	misses := clients*each - int(hits.Load())
	t.Logf("learned %s, delay %s, timeout after the storm %s, %d of %d lookups missed", learned, delay, g.timeouts.timeout(), misses, clients*each)
	require.Positive(t, misses, "Redis slower than the learned timeout (%s): the first lookups timed out", learned)
	require.GreaterOrEqual(t, int(hits.Load()), clients*each*8/10, "most of the storm was answered from Redis (%d misses)", misses)
	require.GreaterOrEqual(t, g.timeouts.timeout(), delay, "the timeout followed Redis's latency up")
	require.Equal(t, 0.0, testutil.ToFloat64(g.open), "timeouts below the ceiling never opened the breaker")
	require.Equal(t, float64(misses), testutil.ToFloat64(g.errs.WithLabelValues("lookup"))-warmTimeouts, "each miss was a timeout, sent to the ledger")
}

// TestSilentRedisCostsFewDeliveries: a Redis that accepts connections and
// never answers costs each lookup the longest timeout until the breaker
// has seen enough of them fail; then lookups stop asking it.
func TestSilentRedisCostsFewDeliveries(t *testing.T) {
	t.Parallel()
	proxy := startDelayProxy(t, redistest.URL(t))
	proxy.delay.Store(int64(time.Hour))
	g, _ := setup(t, proxy.URL, Options{Timeout: DefaultTimeout, OpenFor: time.Hour})
	ctx := context.Background()
	for range 3 * DefaultMinCalls {
		require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_silent"))
	}
	require.Equal(t, 1.0, testutil.ToFloat64(g.open), "the breaker opened")
	waited := testutil.ToFloat64(g.errs.WithLabelValues("lookup"))
	require.GreaterOrEqual(t, waited, float64(DefaultMinCalls))
	require.Less(t, waited, float64(2*DefaultMinCalls), "then no lookup waited for Redis")
	require.Equal(t, DefaultMaxTimeout, g.timeouts.timeout(), "a lookup waits the longest timeout, no more")
}

// unsentHook makes the next n lookups fail as if their deadline had passed
// before the write, as when this process is not scheduled in time.
type unsentHook struct{ n atomic.Int64 }

func (h *unsentHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *unsentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "exists" && h.n.Add(-1) >= 0 {
			cmd.SetErr(writeTimeout)
			return writeTimeout
		}
		return next(ctx, cmd)
	}
}

func (h *unsentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestUnsentLookupIsAskedAgain: a lookup whose deadline passed before it
// was sent is asked once more, and answers; twice unsent, it is no marker
// and no verdict on Redis.
func TestUnsentLookupIsAskedAgain(t *testing.T) {
	t.Parallel()
	g, rdb := setup(t, redistest.URL(t), Options{MinCalls: 1})
	hook := &unsentHook{}
	g.rdb.AddHook(hook)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, g.Key("stripe", "evt_unsent"), "1", time.Minute).Err())

	hook.n.Store(1)
	require.True(t, g.Seen(ctx, "stripe", "stripe", "evt_unsent"), "asked again, answered")
	require.Equal(t, 0.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")))

	hook.n.Store(2)
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_unsent"), "unsent twice: no marker")
	require.Equal(t, 1.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")), "the delivery went to the ledger")
	require.Equal(t, 0.0, testutil.ToFloat64(g.open), "no verdict on Redis")
	require.True(t, g.Seen(ctx, "stripe", "stripe", "evt_unsent"))
}
