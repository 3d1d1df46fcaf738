package failure

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNormaliseGroupsOneCause: the failures of one cause with different
// ids, numbers and quoted values read alike; other causes, handlers or
// sources do not.
func TestNormaliseGroupsOneCause(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ lastError, handler, wantHandler, want string }{
		{`subscription.Flush: ERROR: new row for relation "subscription" violates check constraint "no_broken_plan" (SQLSTATE 23514)`, "",
			"subscription.Flush", `ERROR: new row for relation "…" violates check constraint "…" (SQLSTATE <n>)`},
		{`gave up after 84 attempts: payment.stripeChargeRefunded: customer cus_NffrFeUfNV2Hib has no payment pi_3MtwBwLkdIwHu7ix28a3tqPa`, "",
			"payment.stripeChargeRefunded", `customer <id> has no payment <id>`},
		{"usage.Flush: panic: runtime error: index out of range [3] with length 3\nusage.(*Module).add\n\t/src/usage.go:42", "usage.Flush",
			"usage.Flush", `panic: runtime error: index out of range [<n>] with length <n>`},
		{`River cancelled the apply job 4711 (River UI Cancel)`, "", "", `River cancelled the apply job <n> (River UI Cancel)`},
		{`github.push: delivery 0b1e2f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b: ref 'refs/heads/main' at 9fceb02d0ae598e95dc970b74767f19372d61af8`, "",
			"github.push", `delivery <uuid>: ref '…' at <n>`},
	} {
		handler, text := Split(c.lastError, c.handler)
		require.Equal(t, c.wantHandler, handler, c.lastError)
		require.Equal(t, c.want, Normalise(text), c.lastError)
	}
	a := groupID("stripe", "payment.x", Normalise("customer cus_1 not found"))
	require.Equal(t, a, groupID("stripe", "payment.x", Normalise("customer cus_2 not found")), "ids normalised")
	require.NotEqual(t, a, groupID("stripe-eu", "payment.x", Normalise("customer cus_1 not found")), "another source")
	require.NotEqual(t, a, groupID("stripe", "payment.y", Normalise("customer cus_1 not found")), "another handler")
	require.NotEqual(t, a, groupID("stripe", "payment.x", Normalise("customer cus_1 deleted")), "another error")
	require.Len(t, a, 16)
}
