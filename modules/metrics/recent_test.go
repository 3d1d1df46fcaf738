package metrics

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRecentWindows(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := NewRecent()
	r.now = func() time.Time { return now }
	r.Add("stripe")
	now = now.Add(30 * time.Minute)
	r.Add("stripe")
	r.Add("github")
	now = now.Add(90 * time.Minute)
	r.Add("stripe")
	h, d := r.Counts("stripe")
	require.Equal(t, int64(1), h)
	require.Equal(t, int64(3), d)
	now = now.Add(23 * time.Hour)
	h, d = r.Counts("stripe")
	require.Equal(t, int64(0), h)
	require.Equal(t, int64(1), d, "only the last event is within a day")
	now = now.Add(2 * time.Hour)
	_, d = r.Counts("stripe")
	require.Zero(t, d)
	h, d = r.Counts("nobody")
	require.Zero(t, h+d)
	require.ElementsMatch(t, []string{"stripe", "github"}, r.Keys())
}
