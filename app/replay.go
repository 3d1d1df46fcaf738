package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/replay"
)

func replayCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay stripe|paddle|github",
		Short: "Pull missed events back from a provider's API",
		Long: `Pull events back from a provider's API and feed each through the same
claim as an HTTP delivery: what the ledger has is a duplicate, only missing
events are new. With DATABASE_URL and no --target, events are claimed here;
with --target, each is POSTed there with X-Replay-Token: $REPLAY_TOKEN.

Times are RFC 3339, Unix seconds, or a duration meaning that long ago (2h).
The last line of stdout is {"fetched":N,"new":N,"duplicate":N,"failed":N},
with "erased":N when events holding a subject hookledger erase erased in
the namespace were left unclaimed (claimed here only; a --target receiver
claims what it is sent); the exit code is 1 when anything failed.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(replayEventsCommand("stripe", "STRIPE_API_KEY"), replayEventsCommand("paddle", "PADDLE_API_KEY"), replayGitHubCommand())
	return cmd
}

// window reads --since (required) and --until.
func window(since, until string) (time.Time, time.Time, error) {
	now := time.Now()
	from, err := parseWhen("since", since, now)
	if err != nil {
		return from, time.Time{}, err
	}
	if from.IsZero() {
		return from, time.Time{}, usageError("--since is required")
	}
	to, err := parseWhen("until", until, now)
	return from, to, err
}

// replayEventsCommand replays a provider with an events API (Stripe,
// Paddle).
func replayEventsCommand(name, keyVar string) *cobra.Command {
	var since, until, types, target, source, after string
	var failedOnly, thin bool
	cmd := &cobra.Command{
		Use:   name + " --since T [--until T] [--types a,b] [--target URL]" + map[string]string{"paddle": " [--after ID]", "stripe": " [--thin]"}[name],
		Short: "Replay " + strings.ToUpper(name[:1]) + name[1:] + "'s events API (needs " + keyVar + ")",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, to, err := window(since, until)
			if err != nil {
				return err
			}
			if thin && failedOnly {
				return usageError("--failed-only has no equivalent for thin events: Stripe's v2 events API cannot filter by delivery")
			}
			cfg, err := config.Load()
			if err != nil {
				return fmt.Errorf("configuration:\n%w", err)
			}
			key := cfg.StripeAPIKey
			if name == "paddle" {
				key = cfg.PaddleAPIKey
			}
			if key == "" {
				return fmt.Errorf("%s is not set: replay reads %s's events API with it", keyVar, name)
			}
			ctx := cmd.Context()
			sink, closeSink, err := replaySink(ctx, cfg, name, source, target)
			if err != nil {
				return err
			}
			defer closeSink()
			progress, done := progressReporter(cmd.ErrOrStderr())
			defer done()
			var stats replay.Stats
			switch {
			case name == "stripe" && thin:
				stats, err = replay.StripeThin(ctx, replay.StripeOptions{
					APIBase: cfg.StripeAPIBase, APIKey: key.Reveal(), Since: from, Until: to, Types: splitList(types),
				}, sink, progress)
			case name == "stripe":
				stats, err = replay.Stripe(ctx, replay.StripeOptions{
					APIBase: cfg.StripeAPIBase, APIKey: key.Reveal(), Since: from, Until: to, Types: splitList(types), FailedOnly: failedOnly,
				}, sink, progress)
			default:
				stats, err = replay.Paddle(ctx, replay.PaddleOptions{
					APIBase: cfg.PaddleAPIBase, APIKey: key.Reveal(), Since: from, Until: to, Types: splitList(types), After: after,
				}, sink, progress)
			}
			done()
			return printStats(cmd.OutOrStdout(), stats, err)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "from: RFC 3339, Unix seconds or a duration ago (2h); required")
	fl.StringVar(&until, "until", "", "to (default now)")
	fl.StringVar(&types, "types", "", "comma-separated event types")
	fl.StringVar(&target, "target", "", "POST events to this receiver URL with X-Replay-Token instead of claiming them here")
	fl.StringVar(&source, "source", name, "configured source whose namespace direct mode claims into")
	if name == "stripe" {
		fl.BoolVar(&failedOnly, "failed-only", false, "only events whose delivery failed (delivery_success=false)")
		fl.BoolVar(&thin, "thin", false, "replay thin events (event destinations) from /v2/core/events instead of /v1/events")
	} else {
		fl.StringVar(&after, "after", "", "go on from this event id: the resume of a run that stopped at its page cap")
	}
	return cmd
}

func replayGitHubCommand() *cobra.Command {
	var since, repo, hook, source string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "github --repo owner/name --hook ID --since T [--dry-run]",
		Short: "Ask GitHub to redeliver the hook's failed deliveries the ledger lacks (needs GITHUB_TOKEN)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, _, err := window(since, "")
			if err != nil {
				return err
			}
			if repo == "" || hook == "" {
				return usageError("replay github needs --repo owner/name and --hook ID")
			}
			cfg, err := config.Load()
			if err != nil {
				return fmt.Errorf("configuration:\n%w", err)
			}
			if cfg.GitHubToken == "" {
				return errors.New("GITHUB_TOKEN is not set: replay lists and redelivers the hook's deliveries with it")
			}
			ctx, stdout := cmd.Context(), cmd.OutOrStdout()
			o := replay.GitHubOptions{
				APIBase: cfg.GitHubAPIBase, Token: cfg.GitHubToken.Reveal(), Repo: repo, HookID: hook, Since: from, DryRun: dryRun,
				Report: func(d replay.Delivery) {
					verb := "redelivering"
					if dryRun {
						verb = "would redeliver"
					}
					fmt.Fprintf(stdout, "%s %s (delivery %d, %s, last status %d)\n", verb, d.GUID, d.ID, d.Event, d.StatusCode)
				},
			}
			if cfg.DatabaseURL != "" {
				env, err := openOps(ctx)
				if err != nil {
					return err
				}
				defer env.close()
				ns := intakeSource(env.cfg, source, "github").Namespace
				o.Seen = func(ctx context.Context, guid string) (bool, error) {
					_, err := env.store.Find(ctx, ns, guid)
					if errors.Is(err, ledger.ErrNotFound) {
						return false, nil
					}
					return err == nil, err
				}
			}
			progress, done := progressReporter(cmd.ErrOrStderr())
			defer done()
			stats, err := replay.GitHub(ctx, o, progress)
			done()
			return printStats(stdout, stats, err)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "from: RFC 3339, Unix seconds or a duration ago (24h); required")
	fl.StringVar(&repo, "repo", "", "owner/name")
	fl.StringVar(&hook, "hook", "", "webhook id (X-GitHub-Hook-ID)")
	fl.StringVar(&source, "source", "github", "configured source whose namespace the ledger is checked in")
	fl.BoolVar(&dryRun, "dry-run", false, "list the deliveries that would be redelivered")
	return cmd
}

// printStats writes the JSON stats as the last line and passes err on.
func printStats(w io.Writer, stats replay.Stats, err error) error {
	line, _ := json.Marshal(stats)
	fmt.Fprintln(w, string(line))
	return err
}

func splitList(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// replaySink claims directly when DATABASE_URL is set, or posts to target.
func replaySink(ctx context.Context, cfg *config.Config, providerName, sourceName, target string) (replay.Sink, func(), error) {
	if target != "" {
		if cfg.ReplayToken == "" {
			return nil, nil, usageError("--target needs REPLAY_TOKEN, the token the receiver expects")
		}
		return &replay.Target{URL: target, Token: cfg.ReplayToken.Reveal(), HTTP: &http.Client{Timeout: 30 * time.Second}}, func() {}, nil
	}
	if cfg.DatabaseURL == "" {
		return nil, nil, usageError("set DATABASE_URL to claim events directly, or pass --target URL")
	}
	env, err := openOps(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &replay.Direct{Source: intakeSource(env.cfg, sourceName, providerName), Claimer: env.store}, env.close, nil
}

// progressReporter shows a live counter on a terminal and nothing
// otherwise.
func progressReporter(w io.Writer) (func(replay.Stats), func()) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil, func() {}
	}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetDescription("replaying"),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
	return func(s replay.Stats) {
			bar.Describe(fmt.Sprintf("fetched %d  new %d  duplicate %d  failed %d  erased %d", s.Fetched, s.New, s.Duplicate, s.Failed, s.Erased))
			_ = bar.Add(1)
		}, func() {
			_ = bar.Finish()
		}
}
