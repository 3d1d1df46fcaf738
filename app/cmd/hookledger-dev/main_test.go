package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func runDevCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestHelpListsToolsBesideHookledger: hookledger-dev is hookledger's
// command line plus the development tools, and each has its --help without
// a database. The bench runs its service as `hookledger-dev serve`.
func TestHelpListsToolsBesideHookledger(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	code, stdout, stderr := runDevCLI("--help")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "hookledger-dev [command]")
	for _, name := range []string{"dev", "devdb", "bench", "bench-redis", "serve", "migrate", "trigger"} {
		require.Regexp(t, `(?m)^  `+name+` `, stdout, "hookledger-dev lists %s", name)
		code, stdout, stderr := runDevCLI(name, "--help")
		require.Equal(t, 0, code, "%s --help: %s", name, stderr)
		require.Contains(t, stdout, "Usage:", "%s --help", name)
	}
	code, stdout, _ = runDevCLI("bench", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "hookledger-dev bench [--events N] [--clients C]", "the Use line spells the flags, not [flags]")
}

// TestBenchUsageErrors: out-of-range flags and stray arguments exit 2
// before anything starts.
func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "--events", "0"},
		{"bench", "--ledger-rows", "5", "--storage"},
		{"bench", "now"},
		{"bench-redis", "--deliveries", "0"},
		{"bench-redis", "--clients=x"},
	} {
		code, stdout, stderr := runDevCLI(args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, "%v", args)
		require.Contains(t, stderr, "hookledger-dev: ", "%v", args)
		require.Contains(t, stderr, "Run 'hookledger-dev "+args[0]+" --help' for usage.", "%v", args)
	}
}
