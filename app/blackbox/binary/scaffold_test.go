package binary_test

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProductionBinaryHasNoScaffold: the hookledger binary, run as a user
// runs it, has no new command, and holds neither the command nor the
// scaffold's templates; hookledger-dev new module is the scaffold.
func TestProductionBinaryHasNoScaffold(t *testing.T) {
	t.Parallel()
	bin := hookledgerBinary(t)
	for _, args := range [][]string{{"new", "module", "invoice"}, {"new"}} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, append(os.Environ(), "DATABASE_URL=")
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v", args)
		require.Equal(t, 2, exit.ExitCode(), "%v: %s", args, stderr.String())
		require.Contains(t, stderr.String(), `unknown command "new"`, "%v", args)
	}
	help, err := exec.Command(bin, "--help").Output()
	require.NoError(t, err)
	require.NotRegexp(t, `(?m)^  new `, string(help))
	raw, err := os.ReadFile(bin)
	require.NoError(t, err)
	for _, s := range []string{"Scaffold a feature module", "scaffold/module.go.tmpl", "hookledger-dev new module"} {
		require.NotContains(t, string(raw), s, "hookledger holds %q", s)
	}
}
