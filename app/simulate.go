package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/provider"
	"github.com/hookledger/hookledger/modules/simulate"
)

// cmdSimulate plays a provider against a receiver. The last line of stdout
// is the JSON report; exit 1 when some event never got a 2xx.
func cmdSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	fs := newFlags("simulate", stderr)
	name := fs.String("provider", "stripe", "stripe, github, shopify, paddle, slack or standard")
	source := fs.String("source", "", "source name in the URL (default: the provider)")
	url := fs.String("url", "", "receiver endpoint (default http://HTTP_ADDR/webhooks/<source>)")
	secret := fs.String("secret", "", "signing secret (default: the source's first configured secret)")
	events := fs.Int("events", 100, "distinct events")
	dups := fs.Float64("duplicates", 0.3, "share of events delivered twice")
	reorder := fs.Float64("reorder", 0.2, "share of deliveries sent out of order")
	rate := fs.Float64("rate", 0, "deliveries per second (0: as fast as concurrency allows)")
	conc := fs.Int("concurrency", 8, "concurrent deliveries")
	deadline := fs.Duration("deadline", 2*time.Minute, "stop retrying after")
	prefix := fs.String("prefix", strconv.FormatInt(time.Now().Unix()%1e6, 36)+"_", "event id prefix, unique per run")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, ok := provider.Lookup(*name)
	if !ok {
		return fmt.Errorf("%w: unknown provider %q", errUsage, *name)
	}
	if *source == "" {
		*source = p.Name
	}
	if *url == "" {
		*url = "http://" + localAddr(cfg.HTTPAddr) + "/webhooks/" + *source
	}
	if *secret == "" {
		s, ok := cfg.Source(*source)
		if !ok {
			return fmt.Errorf("%w: no secret for source %s: pass --secret or set its variable", errUsage, *source)
		}
		*secret = s.Secrets[0].Reveal()
	}
	r, err := simulate.Run(ctx, simulate.Options{
		URL: *url, Provider: p, Secret: *secret, Events: *events, Prefix: *prefix, Duplicates: *dups, Reorder: *reorder,
		Rate: *rate, Concurrency: *conc, Deadline: *deadline, Seed: uint64(time.Now().UnixNano()),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent %d deliveries of %d events (%d duplicates, %d retries) to %s in %.1fs\n",
		r.Deliveries, r.Events, r.Duplicates, r.Retries, *url, r.Elapsed)
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
