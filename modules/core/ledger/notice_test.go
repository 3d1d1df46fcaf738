package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNoticePacing: a claim notifies unless a notice went out within
// FetchCooldown; claims in flight together each notify; a claim that
// inserted nothing sent none and holds back no other claim's notice.
func TestNoticePacing(t *testing.T) {
	var n notice
	t0 := time.Millisecond // early in the process: the first claim notifies
	require.True(t, n.due(t0), "the first claim notifies")
	// A claim of duplicates only, and a claim in flight beside it that
	// inserts: both were due, the second's notice went out.
	require.True(t, n.due(t0+time.Millisecond), "a claim beside one that may insert nothing")
	n.sent(t0 + time.Millisecond)
	require.False(t, n.due(t0+FetchCooldown/2), "within the cooldown of a notice that went out")
	require.True(t, n.due(t0+time.Millisecond+FetchCooldown), "once the cooldown is over")
	// A claim that started earlier and finished later does not move the
	// last notice back.
	n.sent(t0)
	require.False(t, n.due(t0+FetchCooldown/2+time.Millisecond))
}
