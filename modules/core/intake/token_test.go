package intake_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/intake"
)

// TestTokenEqual: only the token itself matches: not a prefix, not an
// extension, not the empty string, and an empty token matches nothing.
func TestTokenEqual(t *testing.T) {
	t.Parallel()
	want := "replay-token-0123456789"
	require.True(t, intake.TokenEqual(want, want))
	for _, got := range []string{"", "r", want[:len(want)-1], want + "0", strings.ToUpper(want), " " + want, strings.Repeat("x", len(want))} {
		require.False(t, intake.TokenEqual(got, want), "%q", got)
	}
	require.False(t, intake.TokenEqual("", ""), "an empty token matches nothing")
}
