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
	if n <= 1 {
		return nil
	}
	return ask(t, b.yes, "this would", what)
}

// ask lets a change go ahead: --yes (yes), or a person on a terminal, says
// so; without a terminal it is refused, the refusal starting with lead.
func ask(t terminal, yes bool, lead, what string) error {
	if yes {
		return nil
	}
	if !t.interactive {
		return usageError("%s %s; pass --yes to confirm without a terminal, or --dry-run to see them", lead, what)
	}
	fmt.Fprintf(t.errOut, "This will %s. Continue? [y/N] ", what)
	answer, _ := bufio.NewReader(t.in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("cancelled: nothing changed")
}
