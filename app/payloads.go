package app

import (
	"fmt"

	"github.com/spf13/cobra"
)

func payloadsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "payloads",
		Short: "Manage the encryption of stored payloads (PAYLOAD_KEYS)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "rekey",
		Short: "Seal every stored payload with the first key of PAYLOAD_KEYS",
		Long: `Re-encrypt, in batches, every stored payload that is plaintext (stored
before PAYLOAD_KEYS was set) or sealed by another key than the first of
PAYLOAD_KEYS (after a rotation). It can be stopped and run again: it takes
only what is not yet under the first key. Once it has run, a key that is no
longer first can be removed from PAYLOAD_KEYS.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			if env.sealer == nil {
				return usageError("PAYLOAD_KEYS is not set: there is no key to seal with")
			}
			n, err := env.store.Rekey(ctx)
			if n > 0 || err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "sealed %d payload(s) with key %s\n", n, env.sealer.SealingKeyID())
			}
			return err
		},
	})
	return cmd
}
