package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// throttleClock is a clock the test moves by hand.
type throttleClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *throttleClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *throttleClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// throttled is a logger through a ThrottleHandler on a clock of the test's,
// writing JSON lines.
type throttled struct {
	log     *slog.Logger
	handler *ThrottleHandler
	clock   *throttleClock
	mu      sync.Mutex
	out     bytes.Buffer
}

func newThrottled(t *testing.T) *throttled {
	t.Helper()
	tl := &throttled{clock: &throttleClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	next := slog.NewJSONHandler(lockedWriter{tl}, &slog.HandlerOptions{Level: slog.LevelDebug})
	tl.handler = NewThrottleHandler(next, LogThrottleInterval)
	tl.handler.state.nowFunc = tl.clock.Now
	tl.log = slog.New(tl.handler)
	return tl
}

type lockedWriter struct{ tl *throttled }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.tl.mu.Lock()
	defer w.tl.mu.Unlock()
	return w.tl.out.Write(p)
}

// lines returns the records written since the last call, decoded.
func (tl *throttled) lines(t *testing.T) []map[string]any {
	t.Helper()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(tl.out.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		delete(m, "time")
		out = append(out, m)
	}
	tl.out.Reset()
	return out
}

func TestThrottleRepeatsWithinTheInterval(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	for i := range 100 {
		tl.log.Error("producer: Error fetching jobs", "attempt", i)
		tl.clock.Add(50 * time.Millisecond)
	}
	require.Equal(t, []map[string]any{{"level": "ERROR", "msg": "producer: Error fetching jobs", "attempt": 0.0}}, tl.lines(t))

	tl.clock.Add(LogThrottleInterval)
	tl.log.Error("producer: Error fetching jobs", "attempt", 100)
	require.Equal(t, []map[string]any{{"level": "ERROR", "msg": "producer: Error fetching jobs", "attempt": 100.0, "suppressed": 99.0}}, tl.lines(t),
		"the first record after the interval carries the count of the dropped ones")

	tl.log.Error("producer: Error fetching jobs", "attempt", 101)
	require.Empty(t, tl.lines(t), "a new interval began with that record")
	tl.clock.Add(LogThrottleInterval)
	tl.log.Error("producer: Error fetching jobs", "attempt", 102)
	require.Equal(t, []map[string]any{{"level": "ERROR", "msg": "producer: Error fetching jobs", "attempt": 102.0, "suppressed": 1.0}}, tl.lines(t))
	tl.clock.Add(LogThrottleInterval)
	tl.log.Error("producer: Error fetching jobs", "attempt", 103)
	require.Equal(t, []map[string]any{{"level": "ERROR", "msg": "producer: Error fetching jobs", "attempt": 103.0}}, tl.lines(t),
		"nothing was dropped: no count")
}

func TestThrottleKeysAreIndependent(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	for range 3 {
		tl.log.Error("elector: Error attempting to elect")
		tl.log.Error("notifier: Error listening")
		tl.log.Warn("notifier: Error listening")
	}
	require.Equal(t, []map[string]any{
		{"level": "ERROR", "msg": "elector: Error attempting to elect"},
		{"level": "ERROR", "msg": "notifier: Error listening"},
		{"level": "WARN", "msg": "notifier: Error listening"},
	}, tl.lines(t), "each message at each level passes once")
}

func TestThrottleLeavesInfoAndDebugAlone(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	for range 5 {
		tl.log.Info("producer: Heartbeat")
		tl.log.Debug("producer: Fetched jobs")
	}
	require.Len(t, tl.lines(t), 10)
}

// TestThrottleCountOfAMessageThatStopped: the count of a message that is
// not said again is emitted by the next record of another message after
// its interval, or by Flush, with the last dropped record's attributes.
func TestThrottleCountOfAMessageThatStopped(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	for i := range 10 {
		tl.log.Error("elector: Error attempting to elect", "err", "attempt "+string(rune('0'+i)))
	}
	tl.log.Info("before the interval ends")
	require.Len(t, tl.lines(t), 2)

	tl.clock.Add(LogThrottleInterval)
	tl.log.Info("client: River client started")
	require.Equal(t, []map[string]any{
		{"level": "ERROR", "msg": "elector: Error attempting to elect", "err": "attempt 9", "suppressed": 9.0},
		{"level": "INFO", "msg": "client: River client started"},
	}, tl.lines(t))
	tl.log.Info("again")
	require.Len(t, tl.lines(t), 1, "the count is emitted once")

	for range 4 {
		tl.log.Warn("producer: Queue status update failed")
	}
	require.Len(t, tl.lines(t), 1)
	require.NoError(t, tl.handler.Flush(context.Background()))
	require.Equal(t, []map[string]any{{"level": "WARN", "msg": "producer: Queue status update failed", "suppressed": 3.0}}, tl.lines(t))
	require.NoError(t, tl.handler.Flush(context.Background()))
	require.Empty(t, tl.lines(t), "flushed once")
	tl.log.Warn("producer: Queue status update failed")
	require.Empty(t, tl.lines(t), "still within the interval")
}

// TestThrottleKeepsAttrsAndGroups: derived loggers write their own
// attributes and groups, the count of a dropped record included, and share
// the counts of their parent.
func TestThrottleKeepsAttrsAndGroups(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	producer := tl.log.With("component", "producer").WithGroup("job")
	producer.Error("Error fetching jobs", "queue", "default")
	tl.log.Error("Error fetching jobs")
	producer.Error("Error fetching jobs", "queue", "default")
	require.Equal(t, []map[string]any{
		{"level": "ERROR", "msg": "Error fetching jobs", "component": "producer", "job": map[string]any{"queue": "default"}},
	}, tl.lines(t))

	tl.clock.Add(LogThrottleInterval)
	require.NoError(t, tl.handler.Flush(context.Background()))
	require.Equal(t, []map[string]any{
		{"level": "ERROR", "msg": "Error fetching jobs", "component": "producer", "job": map[string]any{"queue": "default", "suppressed": 2.0}},
	}, tl.lines(t), "written as the last dropped record would have been")
}

func TestThrottleConcurrentRepeats(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				tl.log.Error("notifier: Error listening")
			}
		}()
	}
	wg.Wait()
	require.Len(t, tl.lines(t), 1)
	tl.clock.Add(LogThrottleInterval)
	tl.log.Error("notifier: Error listening")
	require.Equal(t, []map[string]any{{"level": "ERROR", "msg": "notifier: Error listening", "suppressed": 799.0}}, tl.lines(t))
}

// TestThrottleForgetsEndedIntervals: a message said once and not again is
// forgotten after its interval, so varied messages do not grow the state.
func TestThrottleForgetsEndedIntervals(t *testing.T) {
	t.Parallel()
	tl := newThrottled(t)
	for i := range 50 {
		tl.log.Error("job failed", "n", i)
		tl.log.Error("one-off " + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	tl.clock.Add(LogThrottleInterval)
	tl.log.Error("after")
	tl.handler.state.mu.Lock()
	defer tl.handler.state.mu.Unlock()
	require.Len(t, tl.handler.state.windows, 1, "only the message said last has an interval")
}

// TestThrottleInSlogLogger: River's and riverui's logger throttles, and
// the count reaches zap as a field.
func TestThrottleInSlogLogger(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	log := SlogLogger(zap.New(core))
	h, ok := log.Handler().(*ThrottleHandler)
	require.True(t, ok, "%T", log.Handler())
	clock := &throttleClock{now: time.Unix(0, 0)}
	h.state.nowFunc = clock.Now
	err := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	for range 195 {
		log.Error("producer: Error fetching jobs", "err", err)
	}
	require.Equal(t, 1, logs.Len())
	clock.Add(LogThrottleInterval)
	log.Error("producer: Error fetching jobs", "err", err)
	require.Equal(t, 2, logs.Len())
	require.Equal(t, int64(194), logs.All()[1].ContextMap()["suppressed"])
}
