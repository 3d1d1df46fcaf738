package shortcircuit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// observeN records n lookups of latency d.
func observeN(t *timeouts, n int, d time.Duration) {
	for range n {
		t.observe(d)
	}
}

// TestTimeoutStartsAtTheCeiling: until enough lookups are known, a lookup
// may take the longest timeout.
func TestTimeoutStartsAtTheCeiling(t *testing.T) {
	t.Parallel()
	tt := newTimeouts(5*time.Millisecond, 50*time.Millisecond)
	require.Equal(t, 50*time.Millisecond, tt.timeout())
	observeN(tt, latencyWarm-1, 100*time.Microsecond)
	require.Equal(t, 50*time.Millisecond, tt.timeout(), "not warm yet")
	tt.observe(100 * time.Microsecond)
	require.Equal(t, 5*time.Millisecond, tt.timeout(), "fast lookups: the floor")
}

// TestTimeoutFollowsTheP99: the timeout is twice the p99 of recent
// lookups, within 19% (a bucket), between the floor and the ceiling.
func TestTimeoutFollowsTheP99(t *testing.T) {
	t.Parallel()
	tt := newTimeouts(5*time.Millisecond, 50*time.Millisecond)
	observeN(tt, 990, time.Millisecond)
	observeN(tt, 34, 12*time.Millisecond) // 3.3% of the window
	require.InDelta(t, float64(24*time.Millisecond), float64(tt.timeout()), float64(5*time.Millisecond))
	require.GreaterOrEqual(t, tt.timeout(), 24*time.Millisecond, "a bucket's upper bound: never below twice the p99")

	// 1% or less slower than the rest is beyond the p99.
	tt = newTimeouts(time.Millisecond, 50*time.Millisecond)
	observeN(tt, 1014, 2*time.Millisecond)
	observeN(tt, 10, 40*time.Millisecond)
	require.InDelta(t, float64(4*time.Millisecond), float64(tt.timeout()), float64(time.Millisecond))

	// Slower than the ceiling allows: the ceiling.
	observeN(tt, latencyWindow, 200*time.Millisecond)
	require.Equal(t, 50*time.Millisecond, tt.timeout())

	// The window is the last 1,024 lookups: Redis fast again, the timeout
	// comes back down once the slow ones have left it.
	observeN(tt, latencyWindow-11, 300*time.Microsecond)
	require.Equal(t, 50*time.Millisecond, tt.timeout(), "11 slow lookups are more than 1% of the window")
	tt.observe(300 * time.Microsecond)
	require.Equal(t, time.Millisecond, tt.timeout(), "10 are not: the floor")
}

// TestTimeoutDoublesWhileLookupsTimeOut: a lookup that timed out is
// recorded at what it waited, so lookups that keep timing out double the
// timeout, round after round, up to the ceiling.
func TestTimeoutDoublesWhileLookupsTimeOut(t *testing.T) {
	t.Parallel()
	tt := newTimeouts(5*time.Millisecond, 50*time.Millisecond)
	observeN(tt, 200, 500*time.Microsecond)
	require.Equal(t, 5*time.Millisecond, tt.timeout())
	// Redis now answers in 30 ms; a round is 8 concurrent lookups.
	var rounds []time.Duration
	for tt.timeout() < 30*time.Millisecond {
		observeN(tt, 8, tt.timeout())
		rounds = append(rounds, tt.timeout())
		require.Less(t, len(rounds), 5, "the timeout reaches the latency within a few rounds: %v", rounds)
	}
	for i := 1; i < len(rounds); i++ {
		require.GreaterOrEqual(t, rounds[i], rounds[i-1]*3/2, "each round grows the timeout: %v", rounds)
	}
	observeN(tt, 8, 30*time.Millisecond)
	require.Equal(t, 50*time.Millisecond, tt.timeout(), "twice 30 ms is past the ceiling")
}

// TestTimeoutFloorAboveTheCeiling: a REDIS_TIMEOUT longer than the ceiling
// is every lookup's timeout.
func TestTimeoutFloorAboveTheCeiling(t *testing.T) {
	t.Parallel()
	tt := newTimeouts(time.Second, 50*time.Millisecond)
	require.Equal(t, time.Second, tt.timeout())
	observeN(tt, 100, time.Millisecond)
	require.Equal(t, time.Second, tt.timeout())
}

func TestBuckets(t *testing.T) {
	t.Parallel()
	require.Equal(t, uint8(0), bucket(0))
	require.Equal(t, uint8(0), bucket(bucketBase))
	require.Equal(t, uint8(buckets-1), bucket(time.Hour))
	for _, d := range []time.Duration{60 * time.Microsecond, time.Millisecond, 7 * time.Millisecond, 49 * time.Millisecond, time.Second} {
		i := int(bucket(d))
		require.Greater(t, upper(i), d, "%s is below its bucket's upper bound", d)
		require.LessOrEqual(t, upper(i-1), d, "%s is at or past the bucket below's", d)
	}
}
