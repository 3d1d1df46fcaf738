package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
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
	for _, name := range []string{"dev", "devdb", "bench", "bench-redis", "new", "serve", "migrate", "trigger"} {
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

// TestDocsListTheTools: docs/cli.md lists each tool of hookledger-dev with
// its usage line and summary as --help shows them, and no other.
func TestDocsListTheTools(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../docs/cli.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n## hookledger-dev (development and benchmarks)\n")
	require.True(t, ok, "docs/cli.md has the hookledger-dev section")
	section, _, _ = strings.Cut(section, "\n## ")
	var want []string
	tools := []*cobra.Command{devCommand(), devDBCommand(), benchCommand(), benchRedisCommand()}
	for _, c := range app.NewModuleCommand().Commands() {
		c.Use = "new " + c.Use
		tools = append(tools, c)
	}
	for _, c := range tools {
		require.Contains(t, section, "hookledger-dev "+c.Use+"\n    "+c.Short+"\n", "docs/cli.md lists %q", c.Use)
		want = append(want, "hookledger-dev "+c.Use)
	}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "hookledger-dev ") && !strings.HasPrefix(line, "hookledger-dev (") {
			require.Contains(t, want, line, "docs/cli.md lists a tool hookledger-dev --help does not have")
		}
	}
}
