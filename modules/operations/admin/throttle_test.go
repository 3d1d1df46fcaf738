package admin

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// clock is a time the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testThrottle(maxClients int) (*Throttle, *clock) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	th := NewThrottle()
	th.now, th.maxClients = c.now, maxClients
	return th, c
}

func (t *Throttle) tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.clients)
}

// fail takes a try of addr's and keeps it, as a wrong token does; it
// reports whether a try was granted.
func (t *Throttle) fail(addr netip.Addr) bool {
	wait, _ := t.Take(addr)
	return wait == 0
}

// TestThrottleRefills: a client spends its burst, then waits one interval
// per try; the clock is moved, nothing sleeps. Right credentials give
// their try back.
func TestThrottleRefills(t *testing.T) {
	t.Parallel()
	th, clk := testThrottle(ThrottleClients)
	a := netip.MustParseAddr("203.0.113.7")
	for range 3 * ThrottleBurst {
		wait, _ := th.Take(a)
		require.Zero(t, wait)
		th.Refund(a) // the right token
	}
	for i := range ThrottleBurst {
		wait, last := th.Take(a)
		require.Zero(t, wait, "failure %d is free", i+1)
		require.Equal(t, i == ThrottleBurst-1, last, "failure %d", i+1)
	}
	wait, _ := th.Take(a)
	require.Equal(t, ThrottleEvery, wait)
	clk.add(ThrottleEvery / 3)
	wait, _ = th.Take(a)
	require.Equal(t, ThrottleEvery-ThrottleEvery/3, wait, "the wait shrinks as time passes")
	clk.add(ThrottleEvery - ThrottleEvery/3)
	wait, last := th.Take(a)
	require.Zero(t, wait, "one try earned back")
	require.True(t, last)
	wait, _ = th.Take(a)
	require.Equal(t, ThrottleEvery, wait, "and spent")

	require.True(t, th.fail(netip.MustParseAddr("203.0.113.8")), "another client is not throttled")
	require.True(t, th.fail(netip.MustParseAddr("::ffff:203.0.113.9")))
	require.False(t, th.fail(netip.MustParseAddr("::ffff:203.0.113.7")), "an IPv4-mapped address is its IPv4 address")

	clk.add(ThrottleBurst * ThrottleEvery)
	for range ThrottleBurst {
		require.True(t, th.fail(a), "a full bucket again")
	}
	require.False(t, th.fail(a))
}

// TestThrottleHoldsUnderConcurrency: many requests at once from one
// client get no more than its tries between them.
func TestThrottleHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	th, _ := testThrottle(ThrottleClients)
	a := netip.MustParseAddr("203.0.113.7")
	var granted sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range 10 * ThrottleBurst {
		granted.Add(1)
		go func() {
			defer granted.Done()
			if th.fail(a) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	granted.Wait()
	require.Equal(t, ThrottleBurst, n)
}

// TestThrottleGroupsIPv6By64: the addresses of one /64 share a bucket; a
// neighbouring /64 does not.
func TestThrottleGroupsIPv6By64(t *testing.T) {
	t.Parallel()
	th, _ := testThrottle(ThrottleClients)
	for i := range ThrottleBurst {
		require.True(t, th.fail(netip.MustParseAddr("2001:db8:0:1::"+strconv.FormatInt(int64(i+1), 16))))
	}
	require.False(t, th.fail(netip.MustParseAddr("2001:db8:0:1:ffff::1")))
	require.True(t, th.fail(netip.MustParseAddr("2001:db8:0:2::1")))
	require.Equal(t, 2, th.tracked())
}

// TestThrottleMemoryIsBounded: no more than maxClients addresses are
// held; clients whose buckets are full again are forgotten to make room,
// and while every slot holds a recent failure, new clients share one
// bucket rather than grow the table or go unthrottled. Nothing runs in the
// background.
func TestThrottleMemoryIsBounded(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	th, clk := testThrottle(4)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}) }
	for i := range 4 {
		require.True(t, th.fail(addr(i)))
	}
	require.Equal(t, 4, th.tracked())
	for i := 4; i < 4+ThrottleBurst; i++ {
		require.True(t, th.fail(addr(i)), "the shared bucket has tries left")
	}
	require.Equal(t, 4, th.tracked(), "the table did not grow")
	require.False(t, th.fail(addr(100)), "new clients share one spent bucket")
	require.True(t, th.fail(addr(0)), "a tracked client keeps its own bucket")

	clk.add(2 * ThrottleEvery) // every tracked bucket is full again
	require.True(t, th.fail(addr(200)))
	require.Equal(t, 1, th.tracked(), "full buckets forgotten, the newcomer tracked")
	require.True(t, th.fail(addr(201)))
	require.Equal(t, goroutines, runtime.NumGoroutine(), "no goroutine started")
}

// TestAuthThrottlesWrongTokens: past the burst, a client gets 429 with
// Retry-After whatever it sends, the right token included (or the answer
// would tell a guesser it had found it); another client is untouched, no
// credentials and right ones spend nothing, and the client gets a try back
// once Retry-After has passed.
func TestAuthThrottlesWrongTokens(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.TestMode)
	th, clk := testThrottle(ThrottleClients)
	e := gin.New()
	e.GET("/admin/x", Auth("right-token", nil, th), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	send := func(from, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/admin/x", nil)
		req.RemoteAddr = from + ":5000"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w
	}
	for range 3 * ThrottleBurst {
		require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "").Code, "no credentials spend nothing")
		require.Equal(t, http.StatusNoContent, send("192.0.2.1", "right-token").Code, "success spends nothing")
	}
	for i := range ThrottleBurst {
		require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "guess-"+strconv.Itoa(i)).Code)
	}
	require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "").Code, "no credentials: the challenge, nothing to compare")
	for _, token := range []string{"guess-x", "right-token"} {
		w := send("192.0.2.1", token)
		require.Equal(t, http.StatusTooManyRequests, w.Code, "token %q", token)
		require.Equal(t, strconv.Itoa(int(ThrottleEvery/time.Second)), w.Header().Get("Retry-After"))
		require.Empty(t, w.Header().Get("WWW-Authenticate"))
	}
	require.Equal(t, http.StatusNoContent, send("192.0.2.2", "right-token").Code, "another client")
	require.Equal(t, http.StatusUnauthorized, send("192.0.2.2", "guess").Code, "another client's own burst")

	clk.add(ThrottleEvery)
	require.Equal(t, http.StatusNoContent, send("192.0.2.1", "right-token").Code, "after Retry-After")
	require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "guess").Code, "one try earned back")
	require.Equal(t, http.StatusTooManyRequests, send("192.0.2.1", "right-token").Code, "and spent")
}
