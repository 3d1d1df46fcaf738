package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// UnhandledType is the event type the app's tests send when they need an
// event no module handles. It is reserved: no module may register it (or
// a pattern that matches it), so a module added later never turns those
// tests into waits for a handler that fails on a body it never expected.
const UnhandledType = "hookledger.test.unhandled"

// TestReservedTypeIsUnhandled: no registered module handles the reserved
// test type, for any provider.
func TestReservedTypeIsUnhandled(t *testing.T) {
	t.Parallel()
	modules := handlingModules()
	for _, p := range provider.Names() {
		require.Empty(t, modules(p, UnhandledType), "%s: no module may handle %s", p, UnhandledType)
	}
}
