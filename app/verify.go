package app

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
)

func verifyCommand() *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify --provider P --secret S [--header 'Name: value']... --body-file F [--at UNIX] [--tolerance D]",
		Short: "Check one delivery's signature offline",
		Long: `Check one delivery's signature offline: exit 0 valid, 1 invalid (the reason
on stderr), 2 on a usage error. It judges the signature and the provider's
signature headers only, not the body's JSON. Secrets are numbered from 0,
as the ledger's secret_index and the configuration count them. For
Standard Webhooks v1a (ed25519) signatures give the sender's public key
(whpk_...) with --public-key, or as a --secret; public keys are numbered
after the secrets.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runVerify(o, cmd.OutOrStdout()) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.name, "provider", "", strings.Join(provider.Names(), ", "))
	fl.StringArrayVar(&o.secrets, "secret", nil, "signing secret (repeat for several: any one matches)")
	fl.StringArrayVar(&o.publicKeys, "public-key", nil, "Standard Webhooks ed25519 public key, whpk_... (repeatable)")
	fl.StringArrayVar(&o.headers, "header", nil, "a delivery header, 'Name: value' (repeatable)")
	fl.StringVar(&o.bodyFile, "body-file", "", "file holding the exact body bytes")
	fl.StringVar(&o.at, "at", "", "Unix time to check the timestamp against (default now)")
	fl.StringVar(&o.tolerance, "tolerance", "", "timestamp tolerance: Go duration or seconds; 0 turns the check off (default: the provider's)")
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions(provider.Names(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

type verifyOptions struct {
	name, bodyFile, at, tolerance string
	secrets, publicKeys, headers  []string
}

// runVerify checks one delivery's signature.
func runVerify(o verifyOptions, stdout io.Writer) error {
	p, ok := provider.Lookup(o.name)
	switch {
	case o.name == "":
		return fmt.Errorf("%w: --provider is required (%s)", errUsage, strings.Join(provider.Names(), ", "))
	case !ok:
		return fmt.Errorf("%w: unknown provider %q (%s)", errUsage, o.name, strings.Join(provider.Names(), ", "))
	case len(o.publicKeys) > 0 && p != provider.Standard:
		return usageError("--public-key is for --provider standard (v1a signatures)")
	case len(o.secrets)+len(o.publicKeys) == 0:
		return fmt.Errorf("%w: --secret is required", errUsage)
	case o.bodyFile == "":
		return fmt.Errorf("%w: --body-file is required", errUsage)
	}
	h := http.Header{}
	for _, hv := range o.headers {
		k, v, ok := strings.Cut(hv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%w: --header %q: want 'Name: value'", errUsage, hv)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	body, err := os.ReadFile(o.bodyFile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	now := time.Now()
	if o.at != "" {
		sec, err := strconv.ParseInt(o.at, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: --at %q: want Unix seconds", errUsage, o.at)
		}
		now = time.Unix(sec, 0)
	}
	tol := time.Duration(-1)
	if o.tolerance != "" {
		if tol, err = config.ParseDuration(o.tolerance); err != nil || tol < 0 {
			return fmt.Errorf("%w: --tolerance %q: want a duration such as 10s, or seconds", errUsage, o.tolerance)
		}
	}
	keys := make([][]byte, 0, len(o.secrets)+len(o.publicKeys))
	for _, group := range []struct {
		flag string
		keys []string
	}{{"--secret", o.secrets}, {"--public-key", o.publicKeys}} {
		for i, s := range group.keys {
			if p == provider.Standard {
				if err := provider.CheckStandardKey(s); err != nil {
					return usageError("%s %d (counting from 0): %v", group.flag, i, err)
				}
				// A --public-key is never used as a v1 secret: one without
				// its prefix would be.
				if group.flag == "--public-key" && !strings.HasPrefix(s, provider.StandardPublicKeyPrefix) {
					return usageError("%s %d (counting from 0): want a whpk_ public key", group.flag, i)
				}
			}
			keys = append(keys, []byte(s))
		}
	}
	v, err := p.Verify(h, body, keys, now, tol)
	if err != nil {
		return err
	}
	// No fingerprint: it is keyed with the deployment's key, in the
	// database, which an offline check does not read.
	fmt.Fprintf(stdout, "valid: %s signature matches secret %d (secret_index %d, counting from 0)\n",
		p.Name, v.SecretIndex, v.SecretIndex)
	return nil
}
