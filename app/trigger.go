package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/hookledger/hookledger/modules/features/branchhead"
	"github.com/hookledger/hookledger/modules/features/entitlement"
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/features/usage"
	"github.com/hookledger/hookledger/modules/operations/simulate"
)

// moduleSamples are the registered modules' samples, by module: one line
// each, as registerModules has one registration each (hookledger-dev new
// module adds both). trigger and simulate send them.
var moduleSamples = map[string]func() fs.FS{
	"subscription": subscription.Samples,
	"payment":      payment.Samples,
	"usage":        usage.Samples,
	"branchhead":   branchhead.Samples,
	"invoice":      invoice.Samples,
	"entitlement":  entitlement.Samples,
}

// catalog reads every registered module's samples.
func catalog() (*simulate.Catalog, error) {
	fss := make(map[string]fs.FS, len(moduleSamples))
	for name, samples := range moduleSamples {
		fss[name] = samples()
	}
	return simulate.NewCatalog(fss)
}

type triggerOptions struct {
	url, source, secret, object, bodyFile, legacyType string
	list                                              bool
}

func triggerCommand() *cobra.Command {
	var o triggerOptions
	cmd := &cobra.Command{
		Use:     "trigger TYPE [--url URL] [--object ID] [--body-file FILE] | trigger --list",
		Aliases: []string{"send"},
		Short:   "Send one signed, realistic test event of a type a module handles",
		Long: `Send one signed test event to the dev server (or --url), built from the
sample the module that handles TYPE keeps (modules/features/<module>/samples/,
each from a real provider payload) with a fresh event id, a fresh object id
(unless --object) and the current time. 'trigger --list' lists every sampled
type and the modules whose handlers apply it. --body-file sends that file's
bytes as they are, signed for TYPE's provider (or --source's), whatever its
type; the line printed names the event id and type the receiver reads from
what was sent. The secret is the source's first configured one: the dev
server's Stripe source uses whsec_hookledger_dev; other providers need their
secret variable set (PADDLE_WEBHOOK_SECRET ...) for both the server and
trigger.`,
		Example: `  hookledger trigger invoice.paid
  hookledger trigger customer.subscription.created --object sub_demo
  hookledger trigger customer.subscription.deleted --object sub_demo
  hookledger trigger invoice.voided --body-file my-invoice-event.json
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
			c, err := catalog()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			var types []string
			modules := handlingModules()
			for _, s := range c.Samples() {
				types = append(types, s.Type+"\t"+s.Provider+", "+moduleList(modules(s.Provider, s.Type)))
			}
			return types, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return listSamples(cmd.OutOrStdout())
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
	fl.StringVar(&o.object, "object", "", "object id to use instead of a fresh one (sub_..., pi_..., a customer for an object without an id)")
	fl.StringVar(&o.bodyFile, "body-file", "", "send this file's bytes, signed as they are, instead of the type's sample")
	fl.StringVar(&o.legacyType, "type", "", "event type (same as the argument)")
	fl.StringVar(&o.object, "subscription", "", "same as --object")
	_ = fl.MarkHidden("type")
	_ = fl.MarkHidden("subscription")
	return cmd
}

func listSamples(w io.Writer) error {
	c, err := catalog()
	if err != nil {
		return err
	}
	modules := handlingModules()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tPROVIDER\tMODULE\tSAMPLE")
	for _, s := range c.Samples() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Type, s.Provider, moduleList(modules(s.Provider, s.Type)), s.File)
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

// runTrigger builds (or reads), signs and posts one event, and prints the
// id and type the provider's parser reads from what was sent.
func runTrigger(ctx context.Context, typ string, o triggerOptions, stdout io.Writer) error {
	c, err := catalog()
	if err != nil {
		return err
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	sample, sampled := c.Lookup(typ)
	providerName := sample.Provider
	if !sampled {
		s, ok := cfg.Source(o.source)
		switch {
		case o.bodyFile == "":
			return usageError("%q is not an event type a module has a sample of; hookledger trigger --list shows them (or send your own body with --body-file)", typ)
		case o.source == "":
			providerName = "stripe"
		case !ok:
			return usageError("--source %s is not a configured source", o.source)
		default:
			providerName = s.Provider
		}
	}
	p, _ := provider.Lookup(providerName)
	if o.source == "" {
		o.source = sourceOf(cfg, providerName)
	}
	if o.secret == "" {
		s, ok := cfg.Source(o.source)
		if !ok {
			return usageError("no %s source is configured: set %s_WEBHOOK_SECRET (for the server too) or pass --secret",
				providerName, strings.ToUpper(providerName))
		}
		o.secret = s.Secrets[0].Reveal()
	}
	if o.url == "" {
		o.url = "http://" + localAddr(cfg.HTTPAddr) + "/webhooks/" + o.source
	}
	var d provider.Delivery
	if sampled {
		if d, err = sample.Build(o.object, time.Now()); err != nil {
			return err
		}
	} else {
		// The delivery id of a provider that sends it in a header; a
		// provider that reads it from the body reads the file's.
		d = provider.Delivery{ID: fmt.Sprintf("trigger_%d", time.Now().UnixNano()), Type: typ, At: time.Now()}
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
	sent, err := p.ParseFunc(h, d.Body)
	if err != nil {
		return usageError("--body-file: not a %s event: %v", providerName, err)
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
	fmt.Fprintf(stdout, "%s %s -> %s: %s %s\n", sent.Type, sent.ID, o.url, resp.Status, bytes.TrimSpace(out))
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
