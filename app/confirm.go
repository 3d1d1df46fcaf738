package app

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// bulkFlags are the flags of every command that can touch many events or
// migration steps at once.
type bulkFlags struct {
	dryRun bool
	yes    bool
}

func (b *bulkFlags) register(cmd *cobra.Command, dryRunHelp string) {
	cmd.Flags().BoolVar(&b.dryRun, "dry-run", false, dryRunHelp)
	cmd.Flags().BoolVarP(&b.yes, "yes", "y", false, "do not ask for confirmation (required without a terminal when more than one would change)")
}

// confirm lets a bulk change of n items go ahead: one item needs no
// confirmation, --yes gives it, a person on a terminal is asked, and
// without a terminal it is refused.
func (b *bulkFlags) confirm(t terminal, n int64, what string) error {
	if n <= 1 || b.yes {
		return nil
	}
	if !t.interactive {
		return usageError("this would %s; pass --yes to confirm without a terminal, or --dry-run to see them", what)
	}
	fmt.Fprintf(t.errOut, "This will %s. Continue? [y/N] ", what)
	answer, _ := bufio.NewReader(t.in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("cancelled: nothing changed")
}
