package shortcircuit

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// newBreaker is a breaker on a clock the test moves: it opens when half of
// at least minCalls calls in 10 s failed, for a second, then for pauses
// doubling up to 4 s.
func newBreaker(minCalls int) (*breaker, *clock) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	return &breaker{window: 10 * time.Second, minCalls: minCalls, rate: 0.5, openFor: time.Second, maxOpenFor: 4 * time.Second,
		now: clk.Now, gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})}, clk
}

// allowed asks the breaker for a call and returns its ticket, failing the
// test when the call is refused.
func allowed(t *testing.T, b *breaker) ticket {
	t.Helper()
	tk, ok := b.allow()
	require.True(t, ok, "the call is let through")
	return tk
}

// refused reports whether the breaker refuses a call.
func refused(b *breaker) bool {
	_, ok := b.allow()
	return !ok
}

// calls records ok and failed calls, each one allowed first.
func calls(t *testing.T, b *breaker, ok, failed int) {
	t.Helper()
	for range ok {
		b.record(allowed(t, b), true)
	}
	for range failed {
		b.record(allowed(t, b), false)
	}
}

// TestBreakerOpensOnAFailureRate: a few timeouts in a row do not open the
// breaker; half of the window's calls failing does, once there are enough
// of them.
func TestBreakerOpensOnAFailureRate(t *testing.T) {
	t.Parallel()
	b, clk := newBreaker(20)
	calls(t, b, 100, 30)
	require.False(t, refused(b), "30 failures in a row among 130 calls: 23%")
	calls(t, b, 0, 69)
	require.False(t, refused(b), "99 of 199")
	calls(t, b, 0, 1)
	require.True(t, refused(b), "100 of 200")
	require.Equal(t, 1.0, testutil.ToFloat64(b.gauge))

	b, clk = newBreaker(20)
	calls(t, b, 0, 19)
	require.False(t, refused(b), "fewer calls than minCalls decide nothing")
	clk.Add(10 * time.Second)
	calls(t, b, 0, 1)
	require.False(t, refused(b), "the earlier failures left the window")
	calls(t, b, 0, 18)
	require.False(t, refused(b))
	clk.Add(5 * time.Second)
	calls(t, b, 0, 1)
	require.True(t, refused(b), "20 failures within the window")
}

// TestBreakerProbeOneAtATime: after the pause, one call probes; the others
// stay off Redis until it answers, and only its answer closes or reopens.
func TestBreakerProbeOneAtATime(t *testing.T) {
	t.Parallel()
	b, clk := newBreaker(2)
	before := allowed(t, b) // a call still in flight when the breaker opens
	calls(t, b, 0, 2)
	require.True(t, refused(b))
	b.record(before, true)
	require.True(t, refused(b), "a call from before the breaker opened is no probe")

	clk.Add(time.Second)
	probe := allowed(t, b)
	require.True(t, refused(b), "one probe at a time")
	b.abandon(probe)
	probe = allowed(t, b)
	require.True(t, refused(b), "an abandoned probe let the next one through")
	b.record(probe, false)
	require.True(t, refused(b), "a failed probe reopens")

	clk.Add(2 * time.Second)
	probe = allowed(t, b)
	b.abandon(0)
	require.True(t, refused(b), "another call's abandon is not the probe's")
	b.record(probe, true)
	require.Equal(t, 0.0, testutil.ToFloat64(b.gauge))
	require.False(t, refused(b), "closed")
	calls(t, b, 0, 1)
	require.False(t, refused(b), "a fresh window: one failure is below minCalls")
}

// TestBreakerPauseDoubles: each failed probe doubles the pause, up to the
// longest; so does reopening soon after closing; a breaker that stayed
// closed for a window starts again from the shortest.
func TestBreakerPauseDoubles(t *testing.T) {
	t.Parallel()
	b, clk := newBreaker(2)
	calls(t, b, 0, 2)
	var pauses []time.Duration
	for range 4 {
		opened := clk.Now()
		probe, ok := b.allow()
		for ; !ok; probe, ok = b.allow() {
			clk.Add(250 * time.Millisecond)
		}
		pauses = append(pauses, clk.Now().Sub(opened))
		b.record(probe, false)
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}, pauses)

	clk.Add(4 * time.Second)
	b.record(allowed(t, b), true)
	require.False(t, refused(b), "closed")
	clk.Add(5 * time.Second)
	calls(t, b, 0, 2)
	clk.Add(3 * time.Second)
	require.True(t, refused(b), "reopened 5 s after closing: the pause is still 4 s")
	clk.Add(time.Second)
	b.record(allowed(t, b), true)
	clk.Add(10 * time.Second)
	calls(t, b, 0, 2)
	require.True(t, refused(b))
	clk.Add(time.Second)
	require.False(t, refused(b), "a window closed: the shortest pause again")
}

// verdictGate is a Gate without a client, whose breaker opens on one
// failure among its calls.
func verdictGate() *Gate {
	b, _ := newBreaker(1)
	return &Gate{
		opts:     Options{Timeout: DefaultTimeout, MaxTimeout: DefaultMaxTimeout},
		breaker:  b,
		timeouts: newTimeouts(DefaultTimeout, DefaultMaxTimeout),
		errs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errs"}, []string{"op"}),
	}
}

// Errors of a lookup, as the client returns them.
var (
	readTimeout  = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	writeTimeout = &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	dialTimeout  = &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
)

// TestLookupVerdicts: what a lookup tells the breaker and the timeouts. A
// timeout shorter than the ceiling only lengthens the timeout; waiting the
// ceiling in vain, or an error, is a failure; a lookup never sent is
// neither.
func TestLookupVerdicts(t *testing.T) {
	t.Parallel()
	g := verdictGate()
	for range latencyWarm {
		g.lookup(0, nil, time.Millisecond, g.timeouts.timeout(), false)
	}
	require.Equal(t, DefaultTimeout, g.timeouts.timeout(), "fast lookups: the floor")
	g.lookup(0, redis.Nil, time.Millisecond, DefaultTimeout, false)
	require.Equal(t, 0.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")), "no key is an answer")

	g = verdictGate()
	g.lookup(0, readTimeout, DefaultTimeout, DefaultTimeout, true)
	require.False(t, refused(g.breaker), "a timeout below the ceiling is no failure")
	require.Equal(t, 1.0, testutil.ToFloat64(g.errs.WithLabelValues("lookup")), "it sent the delivery to the ledger")
	g.lookup(0, readTimeout, DefaultMaxTimeout, DefaultMaxTimeout, true)
	require.True(t, refused(g.breaker), "the ceiling waited in vain is a failure")

	g = verdictGate()
	for _, err := range []error{redis.ErrPoolTimeout, context.DeadlineExceeded, writeTimeout} {
		for range 4 * latencyWarm {
			g.lookup(0, err, time.Second, DefaultMaxTimeout, true)
		}
		require.False(t, refused(g.breaker), "%v: never sent, no verdict on Redis", err)
		require.Zero(t, g.timeouts.n, "%v: never sent, no latency", err)
	}

	g = verdictGate()
	for range 4 * latencyWarm {
		waited := g.timeouts.timeout()
		g.lookup(0, readTimeout, waited, waited, true)
	}
	require.Equal(t, DefaultMaxTimeout, g.timeouts.timeout(), "timeouts lengthen the timeout to the ceiling")

	for _, err := range []error{errors.New("connection refused"), dialTimeout} {
		g = verdictGate()
		g.lookup(0, err, time.Millisecond, DefaultMaxTimeout, false)
		require.True(t, refused(g.breaker), "%v is a failure", err)
	}
}
