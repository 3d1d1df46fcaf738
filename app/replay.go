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

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/ledger"
	"github.com/hookledger/hookledger/modules/replay"
)

// cmdReplay pulls events back from a provider's API. The last line of
// stdout is the JSON stats; the exit code is 1 when any event failed.
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("%w: replay stripe|github|paddle --since T [--until T] [--types a,b] [--failed-only] [--target URL]", errUsage)
	}
	name := args[0]
	fs := newFlags("replay "+name, stderr)
	since := fs.String("since", "", "from: RFC 3339, Unix seconds or a duration ago (2h)")
	until := fs.String("until", "", "to (default now)")
	types := fs.String("types", "", "comma-separated event types")
	failedOnly := fs.Bool("failed-only", false, "stripe: only events whose delivery failed (delivery_success=false)")
	target := fs.String("target", "", "POST events to this receiver URL with X-Replay-Token instead of claiming them here")
	sourceName := fs.String("source", name, "configured source whose namespace direct mode claims into")
	repo := fs.String("repo", "", "github: owner/name")
	hook := fs.String("hook", "", "github: webhook id (X-GitHub-Hook-ID)")
	dryRun := fs.Bool("dry-run", false, "github: list the deliveries that would be redelivered")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	now := time.Now()
	from, err := parseWhen(*since, now)
	if err != nil {
		return err
	}
	if from.IsZero() {
		return fmt.Errorf("%w: --since is required", errUsage)
	}
	to, err := parseWhen(*until, now)
	if err != nil {
		return err
	}
	var typeList []string
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			typeList = append(typeList, t)
		}
	}
	cfg, err := config.Load()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	progress, done := progressReporter(stderr)
	defer done()

	var stats replay.Stats
	switch name {
	case "github":
		if *repo == "" || *hook == "" {
			return fmt.Errorf("%w: replay github needs --repo owner/name and --hook ID", errUsage)
		}
		o := replay.GitHubOptions{
			APIBase: cfg.GitHubAPIBase, Token: cfg.GitHubToken.Reveal(), Repo: *repo, HookID: *hook, Since: from, DryRun: *dryRun,
			Report: func(d replay.Delivery) {
				verb := "redelivering"
				if *dryRun {
					verb = "would redeliver"
				}
				fmt.Fprintf(stdout, "%s %s (delivery %d, %s, last status %d)\n", verb, d.GUID, d.ID, d.Event, d.StatusCode)
			},
		}
		if cfg.DatabaseURL != "" {
			a, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer a.Close()
			ns := a.source(*sourceName, "github").Namespace
			o.Seen = func(ctx context.Context, guid string) (bool, error) {
				_, err := ledger.Find(ctx, a.ent, ns, guid)
				if errors.Is(err, ledger.ErrNotFound) {
					return false, nil
				}
				return err == nil, err
			}
		}
		stats, err = replay.GitHub(ctx, o, progress)
	case "stripe", "paddle":
		sink, closeSink, serr := replaySink(ctx, cfg, name, *sourceName, *target)
		if serr != nil {
			return serr
		}
		defer closeSink()
		if name == "stripe" {
			stats, err = replay.Stripe(ctx, replay.StripeOptions{
				APIBase: cfg.StripeAPIBase, APIKey: cfg.StripeAPIKey.Reveal(), Since: from, Until: to, Types: typeList, FailedOnly: *failedOnly,
			}, sink, progress)
		} else {
			stats, err = replay.Paddle(ctx, replay.PaddleOptions{
				APIBase: cfg.PaddleAPIBase, APIKey: cfg.PaddleAPIKey.Reveal(), Since: from, Until: to, Types: typeList,
			}, sink, progress)
		}
	default:
		return fmt.Errorf("%w: replay %s: want stripe, github or paddle", errUsage, name)
	}
	done()
	line, _ := json.Marshal(stats)
	fmt.Fprintln(stdout, string(line))
	return err
}

// replaySink claims directly when DATABASE_URL is set, or posts to target.
func replaySink(ctx context.Context, cfg *config.Config, providerName, sourceName, target string) (replay.Sink, func(), error) {
	if target != "" {
		if cfg.ReplayToken == "" {
			return nil, nil, fmt.Errorf("%w: --target needs REPLAY_TOKEN, the token the receiver expects", errUsage)
		}
		return &replay.Target{URL: target, Token: cfg.ReplayToken.Reveal(), HTTP: &http.Client{Timeout: 30 * time.Second}}, func() {}, nil
	}
	if cfg.DatabaseURL == "" {
		return nil, nil, fmt.Errorf("%w: set DATABASE_URL to claim events directly, or pass --target URL", errUsage)
	}
	a, err := openOps(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &replay.Direct{Source: a.source(sourceName, providerName), Claimer: &ledger.Claimer{DB: a.db, River: a.river}}, a.Close, nil
}

// progressReporter shows a live counter on a terminal and nothing
// otherwise.
func progressReporter(w io.Writer) (func(replay.Stats), func()) {
	f, ok := w.(*os.File)
	if !ok {
		return nil, func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil, func() {}
	}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetDescription("replaying"),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
	return func(s replay.Stats) {
			bar.Describe(fmt.Sprintf("fetched %d  new %d  duplicate %d  failed %d", s.Fetched, s.New, s.Duplicate, s.Failed))
			_ = bar.Add(1)
		}, func() {
			_ = bar.Finish()
		}
}
