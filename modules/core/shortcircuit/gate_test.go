package shortcircuit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/redistest"
)

// clock is a breaker clock the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// setup returns a Gate on url with a prefix of the test's own and a plain
// client for looking at what it wrote. The timeout is generous: these
// tests check what the Gate does, not how fast Redis answers on a busy
// machine.
func setup(t *testing.T, url string, opts Options) (*Gate, *redis.Client) {
	t.Helper()
	opts.URL = url
	opts.Prefix = redistest.Prefix(t)
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	g, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	ropts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(ropts)
	t.Cleanup(func() { _ = rdb.Close() })
	return g, rdb
}

func TestKeysAreBoundedAndDistinct(t *testing.T) {
	t.Parallel()
	g := &Gate{opts: Options{Prefix: DefaultPrefix}}
	require.Equal(t, "hookledger:sc:stripe:evt_1", g.Key("stripe", "evt_1"))
	long := strings.Repeat("x", 255)
	k := g.Key("stripe", long)
	require.True(t, strings.HasPrefix(k, "hookledger:sc:stripe#"), k)
	require.Len(t, k, len("hookledger:sc:stripe#")+64)
	require.NotEqual(t, k, g.Key("stripe", long[:254]+"y"))
	require.NotEqual(t, g.Key("github", "evt_1"), g.Key("stripe", "evt_1"))
}

func TestMarkWritesAMarkerWithTTL(t *testing.T) {
	t.Parallel()
	g, rdb := setup(t, redistest.URL(t), Options{TTL: 30 * time.Second})
	ctx := context.Background()
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_mark"))

	g.Mark("stripe", "evt_mark")
	require.Eventually(t, func() bool { return rdb.Exists(ctx, g.Key("stripe", "evt_mark")).Val() == 1 }, redistest.Patience, 5*time.Millisecond)
	ttl := rdb.TTL(ctx, g.Key("stripe", "evt_mark")).Val()
	require.True(t, ttl > 0 && ttl <= 30*time.Second, "ttl %s", ttl)
	require.True(t, g.Seen(ctx, "stripe", "stripe", "evt_mark"))
	require.False(t, g.Seen(ctx, "stripe", "github", "evt_mark"), "another namespace has no marker")
	require.Equal(t, 1.0, testutil.ToFloat64(g.hits.WithLabelValues("stripe")))

	require.NoError(t, rdb.Del(ctx, g.Key("stripe", "evt_mark")).Err())
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_mark"), "a flushed marker is no marker")
}

// TestBreakerOpensAndCloses: a Redis that keeps failing is no marker, the
// breaker stops asking it once most of MinCalls calls failed, and after
// OpenFor one probe finds it back and closes the breaker.
func TestBreakerOpensAndCloses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	// One success, then three failures: 3 of 4 calls failed.
	g, rdb := setup(t, srv.URL, Options{MinCalls: 4, OpenFor: time.Minute, NowFunc: clk.Now})
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, g.Key("stripe", "evt_b"), "1", time.Minute).Err())
	require.True(t, g.Seen(ctx, "stripe", "stripe", "evt_b"))

	srv.Kill()
	for range 3 {
		require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_b"), "an unreachable Redis is no marker")
	}
	require.Equal(t, 3.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")))
	require.Equal(t, 1.0, testutil.ToFloat64(g.open))
	for range 10 {
		require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_b"))
	}
	require.Equal(t, 3.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")), "an open breaker does not ask")
	g.Mark("stripe", "evt_b")
	require.Eventually(t, func() bool { return testutil.ToFloat64(g.dropped) == 1 }, redistest.Patience, 5*time.Millisecond,
		"a marker is dropped while the breaker is open")

	srv.Restart() // empty, as after a restart without persistence
	require.NoError(t, rdb.Set(ctx, g.Key("stripe", "evt_b"), "1", time.Minute).Err())
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_b"), "still open: not asked")
	// A probe finds Redis back. One that happens to take a connection the
	// restart broke fails and waits out another pause, like any failure.
	require.Eventually(t, func() bool {
		clk.Add(time.Minute)
		return g.Seen(ctx, "stripe", "stripe", "evt_b")
	}, redistest.Patience, 10*time.Millisecond, "the probe finds Redis back")
	require.Equal(t, 0.0, testutil.ToFloat64(g.open))

	srv.Kill()
	clk.Add(time.Minute)
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_b"))
	require.Equal(t, 0.0, testutil.ToFloat64(g.open), "one failure after closing does not reopen")
}

// TestCallerGoneIsNoVerdict: a lookup whose request went away neither
// answers nor counts against Redis.
func TestCallerGoneIsNoVerdict(t *testing.T) {
	t.Parallel()
	g, _ := setup(t, redistest.URL(t), Options{MinCalls: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, g.Seen(ctx, "stripe", "stripe", "evt_gone"))
	require.Equal(t, 0.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")))
	require.Equal(t, 0.0, testutil.ToFloat64(g.open))
}

func TestNilGateIsNoRedis(t *testing.T) {
	t.Parallel()
	var g *Gate
	require.False(t, g.Seen(context.Background(), "stripe", "stripe", "evt_1"))
	g.Mark("stripe", "evt_1")
	require.NoError(t, g.Close())
}

func TestBadURL(t *testing.T) {
	t.Parallel()
	_, err := New(Options{URL: "http://localhost:6379"})
	require.ErrorContains(t, err, "REDIS_URL")
}
