package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoticePacing: the claim wakes the workers at most once per
// FetchCooldown, and a notice the statement did not send is not counted.
func TestNoticePacing(t *testing.T) {
	var n notice
	t0 := time.Unix(1_700_000_000, 0)
	ok, _ := n.due(t0)
	require.True(t, ok, "the first claim notifies")
	ok, _ = n.due(t0.Add(FetchCooldown / 2))
	require.False(t, ok, "within the cooldown")
	ok, undo := n.due(t0.Add(FetchCooldown))
	require.True(t, ok, "once the cooldown is over")
	undo() // the statement inserted nothing: no notice went out
	ok, _ = n.due(t0.Add(FetchCooldown + time.Millisecond))
	require.True(t, ok, "the undone notice leaves the next claim due")
	ok, _ = n.due(t0.Add(FetchCooldown + 2*time.Millisecond))
	require.False(t, ok)
}
