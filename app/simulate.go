package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/operations/simulate"
)

type simulateOptions struct {
	provider, source, url, secret, types, prefix string
	events, concurrency                          int
	duplicates, reorder, rate                    float64
	deadline                                     time.Duration
}

func simulateCommand() *cobra.Command {
	var o simulateOptions
	cmd := &cobra.Command{
		Use:   "simulate [--provider P] [--events N] [--duplicates F] [--reorder F] [--rate R] [--concurrency C]",
		Short: "Play a provider against a receiver: signed events, duplicates, reordering, retries",
		Long: `Play a provider against a running receiver (by default the dev server):
correctly signed events, a share of them delivered twice, some out of order,
each retried as the provider would until it gets a 2xx.

Stripe, Paddle, GitHub and Standard Webhooks send every event type their
modules handle, built from real payloads (see 'hookledger trigger --list');
--types narrows that. Shopify and Slack send generated events that no module
applies. The last line of stdout is the JSON report; the exit code is 1 when
some event never got a 2xx.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimulate(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.provider, "provider", "stripe", strings.Join(provider.Names(), ", "))
	fl.StringVar(&o.source, "source", "", "source name in the URL (default: the provider)")
	fl.StringVar(&o.url, "url", "", "receiver endpoint (default http://HTTP_ADDR/webhooks/<source>)")
	fl.StringVar(&o.secret, "secret", "", "signing secret (default: the source's first configured secret)")
	fl.StringVar(&o.types, "types", "", "comma-separated event types to send in turn (default: every type of the provider's modules)")
	fl.IntVar(&o.events, "events", 100, "distinct events")
	fl.Float64Var(&o.duplicates, "duplicates", 0.3, "share of events delivered twice, 0 to 1")
	fl.Float64Var(&o.reorder, "reorder", 0.2, "share of deliveries sent out of order, 0 to 1")
	fl.Float64Var(&o.rate, "rate", 0, "deliveries per second (0: as fast as concurrency allows)")
	fl.IntVar(&o.concurrency, "concurrency", 8, "concurrent deliveries")
	fl.DurationVar(&o.deadline, "deadline", 2*time.Minute, "stop retrying after")
	fl.StringVar(&o.prefix, "prefix", strconv.FormatInt(time.Now().Unix()%1e6, 36)+"_", "event id prefix, unique per run")
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions(provider.Names(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o simulateOptions) validate() error {
	switch {
	case o.events < 1:
		return usageError("--events %d: want at least 1", o.events)
	case o.duplicates < 0 || o.duplicates > 1:
		return usageError("--duplicates %g: want a share from 0 to 1 (0.3 delivers 30%% of events twice)", o.duplicates)
	case o.reorder < 0 || o.reorder > 1:
		return usageError("--reorder %g: want a share from 0 to 1", o.reorder)
	case o.rate < 0:
		return usageError("--rate %g: want 0 (no limit) or more deliveries per second", o.rate)
	case o.concurrency < 1:
		return usageError("--concurrency %d: want at least 1", o.concurrency)
	case o.deadline <= 0:
		return usageError("--deadline %s: want a positive duration", o.deadline)
	}
	return nil
}

// runSimulate plays a provider against a receiver.
func runSimulate(ctx context.Context, o simulateOptions, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	p, ok := provider.Lookup(o.provider)
	if !ok {
		return usageError("--provider %q: want one of %s", o.provider, strings.Join(provider.Names(), ", "))
	}
	c, err := catalog()
	if err != nil {
		return err
	}
	types := splitList(o.types)
	if len(types) == 0 {
		types = c.TypesOf(p.Name)
	}
	samples := make([]simulate.Sample, len(types))
	for i, typ := range types {
		s, ok := c.Lookup(typ)
		if !ok || s.Provider != p.Name {
			return usageError("--types: %s is not a %s event type a module has a sample of (%s)", typ, p.Name, strings.Join(c.TypesOf(p.Name), ", "))
		}
		samples[i] = s
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if o.source == "" {
		o.source = p.Name
	}
	if o.url == "" {
		o.url = "http://" + localAddr(cfg.HTTPAddr) + "/webhooks/" + o.source
	}
	if o.secret == "" {
		s, ok := cfg.Source(o.source)
		if !ok {
			return usageError("no secret for source %s: pass --secret or set its variable (e.g. %s_WEBHOOK_SECRET)", o.source, strings.ToUpper(p.Name))
		}
		o.secret = s.Secrets[0].Reveal()
	}
	if err := probe(ctx, o.url); err != nil {
		return err
	}
	progress, done := deliveryProgress(stderr)
	r, err := simulate.Run(ctx, simulate.Options{
		URL: o.url, Provider: p, Secret: o.secret, Events: o.events, Prefix: o.prefix, Duplicates: o.duplicates, Reorder: o.reorder,
		Rate: o.rate, Concurrency: o.concurrency, Deadline: o.deadline, Seed: uint64(time.Now().UnixNano()), Samples: samples,
		ProgressFunc: progress,
	})
	done()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent %d deliveries of %d events (%d duplicates, %d retries) to %s in %.1fs\n",
		r.Deliveries, r.Events, r.Duplicates, r.Retries, o.url, r.Elapsed)
	for _, line := range r.Summary() {
		fmt.Fprintln(stdout, line)
	}
	line, _ := json.Marshal(r)
	fmt.Fprintln(stdout, string(line))
	if len(r.Unacked) > 0 {
		return fmt.Errorf("%d event(s) never got a 2xx", len(r.Unacked))
	}
	return nil
}

// probeTimeout bounds the check that a receiver listens.
const probeTimeout = 3 * time.Second

// probe says at once when nothing listens at rawURL, instead of retrying
// every delivery until the deadline.
func probe(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return usageError("--url %q: want http://host:port/webhooks/<source>", rawURL)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	host := net.JoinHostPort(u.Hostname(), port)
	dctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("nothing listens on %s (%v): start the receiver first, e.g. go tool task dev", host, err)
	}
	return c.Close()
}

// deliveryProgress draws a progress bar on a terminal and nothing
// otherwise.
func deliveryProgress(w io.Writer) (func(done, total int), func()) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil, func() {}
	}
	var (
		mu  sync.Mutex
		bar *progressbar.ProgressBar
	)
	return func(done, total int) {
			mu.Lock()
			defer mu.Unlock()
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("delivering"),
					progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
			}
			_ = bar.Set(done)
		}, func() {
			mu.Lock()
			defer mu.Unlock()
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(w)
			}
		}
}
