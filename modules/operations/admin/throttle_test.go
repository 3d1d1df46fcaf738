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

func testThrottle() (*Throttle, *clock) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	th := NewThrottle()
	th.now = c.now
	return th, c
}

// fail counts a wrong token from addr; it reports whether it was answered
// 401 (a failure left to spend) rather than 429.
func (t *Throttle) fail(addr netip.Addr) bool {
	wait, _ := t.Fail(addr)
	return wait == 0
}

// TestThrottleRefills: a client spends its burst, then waits one interval
// per failure; the clock is moved, nothing sleeps.
func TestThrottleRefills(t *testing.T) {
	t.Parallel()
	th, clk := testThrottle()
	a := netip.MustParseAddr("203.0.113.7")
	for i := range ThrottleBurst {
		wait, last := th.Fail(a)
		require.Zero(t, wait, "failure %d is free", i+1)
		require.Equal(t, i == ThrottleBurst-1, last, "failure %d", i+1)
	}
	wait, _ := th.Fail(a)
	require.Equal(t, ThrottleEvery, wait)
	clk.add(ThrottleEvery / 3)
	wait, _ = th.Fail(a)
	require.Equal(t, ThrottleEvery-ThrottleEvery/3, wait, "the wait shrinks as time passes")
	clk.add(ThrottleEvery - ThrottleEvery/3)
	wait, last := th.Fail(a)
	require.Zero(t, wait, "one failure earned back")
	require.True(t, last)
	wait, _ = th.Fail(a)
	require.Equal(t, ThrottleEvery, wait, "and spent")

	for i := range 64 {
		other := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		if th.slot(other) != th.slot(a) { // a client hashed into a's slot shares its bucket
			require.True(t, th.fail(other), "another client is not throttled")
		}
	}
	require.False(t, th.fail(netip.MustParseAddr("::ffff:203.0.113.7")), "an IPv4-mapped address is its IPv4 address")

	clk.add(ThrottleBurst * ThrottleEvery)
	for range ThrottleBurst {
		require.True(t, th.fail(a), "a full bucket again")
	}
	require.False(t, th.fail(a))
}

// TestThrottleHoldsUnderConcurrency: many wrong tokens at once from one
// client get no more 401s than its burst between them.
func TestThrottleHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	th, _ := testThrottle()
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

// TestThrottleGroupsIPv6By64: the addresses of one /64 share a bucket.
func TestThrottleGroupsIPv6By64(t *testing.T) {
	t.Parallel()
	th, _ := testThrottle()
	for i := range ThrottleBurst {
		require.True(t, th.fail(netip.MustParseAddr("2001:db8:0:1::"+strconv.FormatInt(int64(i+1), 16))))
	}
	require.False(t, th.fail(netip.MustParseAddr("2001:db8:0:1:ffff::1")))
	require.Equal(t, th.slot(netip.MustParseAddr("2001:db8:0:1::1")), th.slot(netip.MustParseAddr("2001:db8:0:1:ffff::1")))
}

// TestThrottleMemoryIsFixed: a flood of wrong tokens from more networks
// than there are slots grows nothing and starts nothing; the buckets are
// the same array before and after.
func TestThrottleMemoryIsFixed(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	th, _ := testThrottle()
	before := &th.slots[0]
	const failures = 4 * ThrottleSlots * ThrottleBurst
	refused := 0
	for i := range failures {
		if !th.fail(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 16), byte(i >> 8), byte(i), 0, 15: 1})) {
			refused++
		}
	}
	require.Len(t, th.slots, ThrottleSlots)
	require.Same(t, before, &th.slots[0], "no table grew")
	require.Equal(t, failures-ThrottleSlots*ThrottleBurst, refused, "each slot answered its burst, then 429")
	require.Equal(t, goroutines, runtime.NumGoroutine(), "no goroutine started")
}

// TestAuthThrottlesWrongTokens: past the burst, a client's wrong tokens
// get 429 with Retry-After; its right token is still served, then and
// always (it is compared first and never counted); another client is
// untouched, no credentials spend nothing, and the client gets a 401 back
// once Retry-After has passed.
func TestAuthThrottlesWrongTokens(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.TestMode)
	th, clk := testThrottle()
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
	w := send("192.0.2.1", "guess-x")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, strconv.Itoa(int(ThrottleEvery/time.Second)), w.Header().Get("Retry-After"))
	require.Empty(t, w.Header().Get("WWW-Authenticate"))
	for range 5 {
		require.Equal(t, http.StatusNoContent, send("192.0.2.1", "right-token").Code, "the right token is never throttled")
	}
	require.Equal(t, http.StatusNoContent, send("192.0.2.2", "right-token").Code, "another client")

	clk.add(ThrottleEvery)
	require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "guess").Code, "one failure earned back")
	require.Equal(t, http.StatusTooManyRequests, send("192.0.2.1", "guess").Code, "and spent")
	require.Equal(t, http.StatusNoContent, send("192.0.2.1", "right-token").Code)
}
