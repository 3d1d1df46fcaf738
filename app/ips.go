package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
)

func ipsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ips update",
		Short: "Manage the providers' published sender address lists",
		Args:  noArgs,
	}
	var file string
	urls := map[string]*string{}
	update := &cobra.Command{
		Use:   "update [--file F]",
		Short: "Fetch Stripe's and GitHub's published webhook addresses into PUBLISHED_IPS_FILE",
		Long: `Fetch the addresses Stripe (ips_webhooks.json) and GitHub (/meta "hooks")
send webhooks from, and write them with the time of fetching to --file
(default PUBLISHED_IPS_FILE), which serve reads for allow_ips: stripe and
allow_ips: github. The file is replaced only when every list was fetched.
Without a file serve uses the copy shipped in the binary. A list older than
PUBLISHED_IPS_MAX_AGE (default 30 days) is reported by
hookledger_published_ips_stale, and a stale file by a warning at start-up.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				cfg, err := config.Load()
				if err != nil {
					return err
				}
				file = cfg.PublishedIPsFile
			}
			if file == "" {
				return usageError("--file is required when PUBLISHED_IPS_FILE is not set")
			}
			from := map[string]string{}
			for name, u := range urls {
				from[name] = *u
			}
			return updatePublishedIPs(cmd.Context(), file, from, cmd.OutOrStdout())
		},
	}
	update.Flags().StringVar(&file, "file", "", "where to write the lists (default PUBLISHED_IPS_FILE)")
	for name, u := range provider.PublishedSources {
		urls[name] = update.Flags().String(name+"-url", u, "where "+name+" publishes its list")
		_ = update.Flags().MarkHidden(name + "-url")
	}
	cmd.AddCommand(update)
	return cmd
}

// updatePublishedIPs fetches every published list and writes them to file.
func updatePublishedIPs(ctx context.Context, file string, from map[string]string, stdout io.Writer) error {
	out := provider.PublishedIPs{
		About: "The providers' published webhook sender addresses, written by hookledger ips update.",
		Lists: map[string]provider.PublishedList{},
	}
	client := &http.Client{Timeout: 20 * time.Second}
	names := make([]string, 0, len(from))
	for name := range from {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		body, err := fetchList(ctx, client, from[name])
		if err != nil {
			return fmt.Errorf("%s: %w; %s left unchanged", name, err, file)
		}
		prefixes, err := provider.ParsePublished(name, body)
		if err != nil {
			return fmt.Errorf("%w; %s left unchanged", err, file)
		}
		out.Lists[name] = provider.PublishedList{Source: from[name], FetchedAt: time.Now().UTC().Truncate(time.Second), Prefixes: prefixes}
		fmt.Fprintf(stdout, "%s: %d networks from %s\n", name, len(prefixes), from[name])
	}
	raw, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".ips-*.json")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	fmt.Fprintf(stdout, "wrote %s\n", file)
	return nil
}

func fetchList(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 4<<20))
}

// allowList builds a source's allow_ips, loading the published lists the
// first time one is named and reporting each list's age from its
// fetched_at at every scrape: a stale list is still enforced, never
// silently (hookledger_published_ips_stale). A stale
// PUBLISHED_IPS_FILE is also warned of at start-up, as hookledger ips
// update no longer refreshes it; the copy shipped in the binary is named
// by an info line instead, since it ages with the release and a warning on
// every start would be one operators learn to ignore.
func (a *App) allowList(s config.Source) (*provider.AllowList, error) {
	if len(s.AllowIPs) == 0 {
		return nil, nil
	}
	if a.published == nil {
		p, err := provider.LoadPublishedIPs(a.cfg.PublishedIPsFile)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", s.Name, err)
		}
		a.published = p
	}
	l, err := provider.NewAllowList(s.AllowIPs, a.published)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	for _, name := range l.Published {
		pl := a.published.Lists[name]
		a.metrics.PublishedIPs.Track(name, pl.FetchedAt, a.cfg.PublishedIPsMaxAge)
		age := time.Since(pl.FetchedAt)
		stale := age > a.cfg.PublishedIPsMaxAge
		fields := []zap.Field{zap.String("list", name), zap.String("from", a.published.Origin), zap.Time("fetched_at", pl.FetchedAt),
			zap.Duration("age", age.Round(time.Hour)), zap.Duration("max_age", a.cfg.PublishedIPsMaxAge), zap.String("source", s.Name)}
		switch {
		case a.cfg.PublishedIPsFile == "":
			a.log.Info("published address list: the copy shipped in the binary (set PUBLISHED_IPS_FILE and run hookledger ips update to refresh it)", fields...)
		case stale:
			a.log.Warn("published address list is stale: run hookledger ips update (it is enforced as it is)", fields...)
		}
	}
	return l, nil
}
