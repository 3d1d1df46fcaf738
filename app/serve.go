package app

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// serveGCPercent is the garbage collector's target in serve, unless GOGC
// is set.
const serveGCPercent = 200

// serve runs one process of role until ctx ends, on ln when given, else
// on HTTP_ADDR: `hookledger serve`. It refuses a source holding the public
// development secret (refuseDevSecret).
func serve(ctx context.Context, cfg *config.Config, role config.Role, ln net.Listener) error {
	if err := refuseDevSecret(cfg); err != nil {
		return err
	}
	return serveRole(ctx, cfg, role, ln)
}

// refuseDevSecret refuses a source with config.DevSecret among its
// secrets. The secret is published (README, hookledger-dev dev's help) so
// that trigger can sign test events for dev: a production source holding
// it verifies events anyone signs, which switches the signature check off
// for everyone. No deployment needs that, so serve refuses it, as the
// configuration refuses a trusted proxy network holding every address,
// rather than warning in a log that may go unread.
func refuseDevSecret(cfg *config.Config) error {
	var bad []string
	for _, s := range cfg.Sources {
		for i, sec := range s.Secrets {
			if sec == config.DevSecret {
				bad = append(bad, fmt.Sprintf("source %s: secret %d is %s, the public development secret of hookledger-dev dev: anyone can sign events with it; "+
					"set the signing secret the provider generated for the endpoint", s.Name, i, config.DevSecret))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("configuration:\n%s", strings.Join(bad, "\n"))
	}
	return nil
}

// serveRole runs one process of role until ctx ends, on ln when given (dev
// listens before it prints its banner), else on HTTP_ADDR.
func serveRole(ctx context.Context, cfg *config.Config, role config.Role, ln net.Listener) error {
	log, err := NewLogger(cfg)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	if cfg.GOGC == "" {
		// The live heap is small (tens of MB) and every request allocates
		// its body: at Go's default of 100 the collector ran often enough
		// to take a seventh of the receiver's CPU. GOGC set in the
		// environment wins.
		debug.SetGCPercent(serveGCPercent)
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile, role)
		if err != nil {
			return err
		}
		defer stop()
	}
	a, err := New(ctx, cfg, log, role)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.requireMigrated(ctx); err != nil {
		return err
	}
	if err := a.checkPayloadKeys(ctx); err != nil {
		return err
	}
	a.logSources()
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
		}
	}
	return a.Serve(ctx, ln)
}

// requireMigrated refuses to start on a database whose migrations are not
// all applied: River and the handlers would fail on missing tables.
func (a *App) requireMigrated(ctx context.Context) error {
	st, err := migrations.Check(ctx, a.db)
	if err != nil {
		return fmt.Errorf("read migration version of %s: %w", config.RedactURL(a.cfg.DatabaseURL.Reveal()), err)
	}
	switch {
	case st.Dirty:
		return fmt.Errorf("database %s is dirty at migration %d (a migration failed part way): fix it, then run `hookledger migrate up`",
			config.RedactURL(a.cfg.DatabaseURL.Reveal()), st.Version)
	case st.Version == 0:
		return fmt.Errorf("database %s is not migrated: run `hookledger migrate up`", config.RedactURL(a.cfg.DatabaseURL.Reveal()))
	case st.Version < st.Latest:
		return fmt.Errorf("database %s is at migration %d of %d: run `hookledger migrate up`",
			config.RedactURL(a.cfg.DatabaseURL.Reveal()), st.Version, st.Latest)
	case st.Version > st.Latest:
		return fmt.Errorf("database %s is at migration %d, newer than this build's %d: run a newer hookledger",
			config.RedactURL(a.cfg.DatabaseURL.Reveal()), st.Version, st.Latest)
	}
	return nil
}

// checkPayloadKeys refuses keys that plainly cannot open the newest
// stored payloads (ledger.CheckSealer), and otherwise counts, logs and
// exports in hookledger_payloads_unreadable the newest payloads that name
// a key PAYLOAD_KEYS lacks: the service runs, their events fail to apply
// with the reason, and payloads check lists them.
func (a *App) checkPayloadKeys(ctx context.Context) error {
	found, err := ledger.CheckSealer(ctx, a.db, a.sealer)
	if err != nil {
		return err
	}
	n := found.Unreadable()
	a.metrics.PayloadsUnreadable.Set(float64(n))
	if n > 0 {
		ids := slices.Sorted(maps.Keys(found.Unknown))
		a.log.Warn("stored payloads are sealed by a key PAYLOAD_KEYS lacks: their events cannot be applied, erase and rekey pass them by; `hookledger payloads check` lists them",
			zap.Int("unreadable", n), zap.Int("sealed", found.Sealed), zap.Int("newest_rows", found.Rows), zap.Strings("key_ids", ids))
	}
	return nil
}

// logSources says at start-up which sources take webhooks, and warns when
// none does.
func (a *App) logSources() {
	if !a.role.TakesWebhooks() {
		return
	}
	if len(a.cfg.Sources) == 0 {
		a.log.Warn("no source is enabled: every webhook will get 404; set a provider secret such as STRIPE_WEBHOOK_SECRET")
		return
	}
	for _, s := range a.cfg.Sources {
		a.log.Info("source enabled", zap.String("source", s.Name), zap.String("provider", s.Provider),
			zap.String("namespace", s.Namespace), zap.String("url", "POST /webhooks/"+s.Name), zap.Int("secrets", len(s.Secrets)))
	}
}

// startCPUProfile writes a CPU profile of this process, from now until
// stop, to path.<role>.<pid>, and at stop its allocations to the same
// name with .allocs: a benchmark starts several serve processes with one
// environment, and each keeps profiles of its own. It is for measuring,
// never on by default.
func startCPUProfile(path string, role config.Role) (stop func(), err error) {
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", path, role, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("HOOKLEDGER_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("HOOKLEDGER_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if h, err := os.Create(fmt.Sprintf("%s.%s.%d.allocs", path, role, os.Getpid())); err == nil {
			pprof.Lookup("allocs").WriteTo(h, 0)
			h.Close()
		}
	}, nil
}
