package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/operations/simulate"
)

type triggerOptions struct {
	url, source, secret, object, bodyFile, legacyType string
	list                                              bool
}

func triggerCommand() *cobra.Command {
	var o triggerOptions
	cmd := &cobra.Command{
		Use:     "trigger TYPE [--url URL] [--object ID] | trigger --list",
		Aliases: []string{"send"},
		Short:   "Send one signed, realistic test event of a type a module handles",
		Long: `Send one signed test event to the dev server (or --url), built from the
real provider payload in testdata/providers with a fresh event id, a fresh
object id (unless --object) and the current time. 'trigger --list' lists the
types and, for each, the modules whose handlers apply it (none: the event
settles without changing anything). The secret is the source's first
configured one: the dev server's Stripe source uses whsec_hookledger_dev;
other providers need their secret variable set (PADDLE_WEBHOOK_SECRET ...)
for both the server and trigger.`,
		Example: `  hookledger trigger invoice.paid
  hookledger trigger customer.subscription.created --object sub_demo
  hookledger trigger customer.subscription.deleted --object sub_demo
  PADDLE_WEBHOOK_SECRET=pdl_ntfset_demo hookledger trigger transaction.completed
  go tool task trigger -- charge.refunded`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return noArgs(cmd, args)
			}
			if len(args) == 0 && o.legacyType != "" {
				return nil
			}
			return exactArgs(1, "one event type (hookledger trigger --list shows them)")(cmd, args)
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			var types []string
			modules := handlingModules()
			for _, t := range simulate.Templates() {
				types = append(types, t.Type+"\t"+t.Provider+", "+moduleList(modules(t.Provider, t.Type)))
			}
			return types, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return listTemplates(cmd.OutOrStdout())
			}
			typ := o.legacyType
			if len(args) == 1 {
				typ = args[0]
			}
			return runTrigger(cmd.Context(), typ, o, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&o.list, "list", false, "list the event types and the modules that apply each")
	fl.StringVar(&o.url, "url", "", "receiver endpoint (default http://HTTP_ADDR/webhooks/<source>)")
	fl.StringVar(&o.source, "source", "", "configured source to sign for and send to (default: the type's provider)")
	fl.StringVar(&o.secret, "secret", "", "signing secret (default: the source's first configured secret)")
	fl.StringVar(&o.object, "object", "", "object id to use instead of a fresh one (sub_..., pi_..., a Standard Webhooks customer id)")
	fl.StringVar(&o.bodyFile, "body-file", "", "send this body instead of the type's payload (signed as is)")
	fl.StringVar(&o.legacyType, "type", "", "event type (same as the argument)")
	fl.StringVar(&o.object, "subscription", "", "same as --object")
	_ = fl.MarkHidden("type")
	_ = fl.MarkHidden("subscription")
	return cmd
}

func listTemplates(w io.Writer) error {
	modules := handlingModules()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tPROVIDER\tMODULE\tBUILT FROM")
	for _, t := range simulate.Templates() {
		fmt.Fprintf(tw, "%s\t%s\t%s\ttestdata/providers/%s\n", t.Type, t.Provider, moduleList(modules(t.Provider, t.Type)), t.File)
	}
	return tw.Flush()
}

// handlingModules answers which modules apply an event type, from the
// registrations themselves: every module registers into a registry as it
// does when the server starts (registerModules, with no database: nothing
// runs), and the registry names the modules of the handlers it finds for
// the type, as the ledger row's handlers column does after an apply.
func handlingModules() func(providerName, eventType string) []string {
	a := &App{cfg: &config.Config{}, log: zap.NewNop(), metrics: metrics.New(), registry: ledger.NewRegistry()}
	a.registerModules()
	return a.registry.Modules
}

// moduleList prints a type's modules for --list: "none" when no handler
// matches it (the event settles and changes nothing).
func moduleList(mods []string) string {
	if len(mods) == 0 {
		return "none"
	}
	return strings.Join(mods, ",")
}

// runTrigger builds, signs and posts one event.
func runTrigger(ctx context.Context, typ string, o triggerOptions, stdout io.Writer) error {
	t, ok := simulate.LookupTemplate(typ)
	if !ok {
		return usageError("%q is not an event type trigger sends; hookledger trigger --list shows them", typ)
	}
	p, _ := provider.Lookup(t.Provider)
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if o.source == "" {
		o.source = sourceOf(cfg, t.Provider)
	}
	if o.secret == "" {
		s, ok := cfg.Source(o.source)
		if !ok {
			return usageError("no %s source is configured: set %s_WEBHOOK_SECRET (for the server too) or pass --secret",
				t.Provider, strings.ToUpper(t.Provider))
		}
		o.secret = s.Secrets[0].Reveal()
	}
	if o.url == "" {
		o.url = "http://" + localAddr(cfg.HTTPAddr) + "/webhooks/" + o.source
	}
	d, err := t.Build(o.object, time.Now())
	if err != nil {
		return err
	}
	if o.bodyFile != "" {
		if d.Body, err = os.ReadFile(o.bodyFile); err != nil {
			return usageError("--body-file: %v", err)
		}
	}
	h, err := p.Sign(o.secret, d)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(d.Body))
	if err != nil {
		return usageError("--url: %v", err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("%w (is the receiver running? go tool task dev)", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%s %s -> %s: %s %s\n", t.Type, d.ID, o.url, resp.Status, bytes.TrimSpace(out))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// sourceOf is the first configured source of a provider, else the
// provider's own name.
func sourceOf(cfg *config.Config, providerName string) string {
	for _, s := range cfg.Sources {
		if s.Provider == providerName {
			return s.Name
		}
	}
	return providerName
}
