package app_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// quoted is a duration as the docs quote it: "72 h", "20 s", "200 ms".
func quoted(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%d ms", d/time.Millisecond)
}

// TestArchitectureQuotesTheLedger: the figures docs/ARCHITECTURE.md and
// the module guide quote are the ledger's constants, and the apply's steps
// the architecture lists are the applier's, in the order it runs them.
func TestArchitectureQuotesTheLedger(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/ARCHITECTURE.md")
	require.NoError(t, err)
	arch := string(raw)
	for name, text := range map[string]string{
		"ApplyTimeout":         "`" + quoted(ledger.ApplyTimeout) + "` (`ledger.ApplyTimeout`",
		"ApplyLockTimeout":     "`" + quoted(ledger.ApplyLockTimeout) + "` for a lock (`ledger.ApplyLockTimeout`)",
		"EventLockTimeout":     "`" + quoted(ledger.EventLockTimeout) + "` a try (`ledger.EventLockTimeout`)",
		"ApplyMaxAttempts":     fmt.Sprintf("`%d` attempts (`ledger.ApplyMaxAttempts`)", ledger.ApplyMaxAttempts),
		"RetryHorizon":         "`" + quoted(ledger.RetryHorizon) + "` (`ledger.RetryHorizon`)",
		"RescueStuckJobsAfter": "`" + quoted(ledger.RescueStuckJobsAfter) + "`\n(`ledger.RescueStuckJobsAfter`)",
	} {
		require.True(t, strings.Contains(arch, text), "docs/ARCHITECTURE.md quotes ledger.%s: %q", name, text)
	}
	guide, err := os.ReadFile("../docs/modules.md")
	require.NoError(t, err)
	for name, text := range map[string]string{
		"ApplyTimeout": "has " + quoted(ledger.ApplyTimeout) + ".",
		"RetryHorizon": fmt.Sprintf("for %d hours", int(ledger.RetryHorizon.Hours())),
	} {
		require.True(t, strings.Contains(string(guide), text), "docs/modules.md quotes ledger.%s: %q", name, text)
	}

	// The applier's steps, in the order its apply runs them.
	src, err := os.ReadFile("../modules/core/ledger/worker.go")
	require.NoError(t, err)
	body := regexp.MustCompile(`(?s)func \(r \*applyRun\) apply\(.*?\n}\n`).FindString(string(src))
	require.NotEmpty(t, body, "worker.go has the applyRun's apply")
	var code []string
	for _, m := range regexp.MustCompile(`(?m)^\t\tr\.(\w+),`).FindAllStringSubmatch(body, -1) {
		code = append(code, m[1])
	}
	require.NotEmpty(t, code)
	_, box, ok := strings.Cut(arch, "Applier ")
	require.True(t, ok, "docs/ARCHITECTURE.md draws the applier")
	box, _, _ = strings.Cut(box, "▼")
	var doc []string
	for _, m := range regexp.MustCompile(`(?m)│ (\w+) {2,}`).FindAllStringSubmatch(box, -1) {
		doc = append(doc, m[1])
	}
	require.Equal(t, code, doc, "docs/ARCHITECTURE.md lists the apply's steps as worker.go runs them")
}
