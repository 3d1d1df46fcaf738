// Package app is hookledger's composition root: it reads the configuration
// once, builds the logger, the pgx pool and its *sql.DB view, the River
// client, the ledger's Store and the gin engine, and wires every module
// explicitly.
package app

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"riverqueue.com/riverui"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/core/receiver"
	"github.com/hookledger/hookledger/modules/core/shortcircuit"
	"github.com/hookledger/hookledger/modules/core/web"
	"github.com/hookledger/hookledger/modules/features/branchhead"
	"github.com/hookledger/hookledger/modules/features/entitlement"
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/features/thin"
	"github.com/hookledger/hookledger/modules/features/usage"
	"github.com/hookledger/hookledger/modules/operations/replay"
)

// Shutdown budget: in-flight requests first, then the workers' soft stop.
const (
	httpShutdownTimeout = 20 * time.Second
	softStopTimeout     = 20 * time.Second
)

// App is one hookledger process.
type App struct {
	cfg      *config.Config
	role     config.Role
	log      *zap.Logger
	pool     *pgxpool.Pool
	listener *pgxpool.Pool
	db       *sql.DB
	river    *river.Client[*sql.Tx]
	metrics  *metrics.Set
	registry *ledger.Registry
	store    *ledger.Store
	riverUI  *riverui.Handler
	// stats is the receiver's delivery counts, and webhooks what POST
	// /webhooks/<source> runs on (roles that take webhooks).
	stats    *ledger.DeliveryStats
	webhooks receiver.Config
	// engine and server serve HTTP_ADDR.
	engine *gin.Engine
	server *http.Server
	// metricsEngine, metricsServer and metricsLn serve METRICS_ADDR, when
	// it is set.
	metricsEngine *gin.Engine
	metricsServer *http.Server
	metricsLn     net.Listener
	// published is the providers' published address lists, once a
	// source's allow_ips names one.
	published *provider.PublishedIPs
	// stop ends what New started in the background (the claim committers
	// and the duplicates' comparison).
	stop context.CancelFunc
	// tracing is nil when tracing is off; stopTracing flushes the exporter.
	tracing     trace.TracerProvider
	stopTracing func(context.Context) error
	// gate is the Redis short-circuit (REDIS_URL), or nil.
	gate *shortcircuit.Gate
	// payloads is what the claims keep for the apply in the same process
	// (role all), or nil.
	payloads *ledger.Payloads
	// sealer encrypts payloads at rest (PAYLOAD_KEYS); nil when off.
	sealer *ledger.Sealer
	// fingerprints names each source's secrets, in their order
	// (secretFingerprints), keyed with fingerprintKey, the deployment's
	// (ledger.FingerprintKey).
	fingerprints   map[string][]string
	fingerprintKey []byte
}

// New connects to the database and builds everything role needs (build).
// Close releases it.
func New(ctx context.Context, cfg *config.Config, log *zap.Logger, role config.Role, opts ...Option) (*App, error) {
	if err := cfg.RequireDatabase(); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, role: role, log: log, metrics: metrics.New(), registry: ledger.NewRegistry()}
	for _, name := range cfg.Disabled {
		log.Warn("source disabled: no secret configured", zap.String("source", name))
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	for _, o := range opts {
		o(a)
	}
	if err := a.build(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// build makes the process, each part from the ones before it: tracing,
// the database pools, the modules' registry, River's client, the ledger's
// Store; for roles that take webhooks the receiver's parts (the stats
// writer, the sources, group commit, the duplicates' comparison, the Redis
// gate); River UI; the HTTP servers; and last the routes, which only mount
// handlers on those parts. Serve runs what build made; Close releases it.
func (a *App) build(ctx context.Context) error {
	if err := a.startTracing(ctx); err != nil {
		return err
	}
	if err := a.openDatabase(ctx); err != nil {
		return err
	}
	a.registerModules()
	if err := a.readFingerprintKey(ctx); err != nil {
		return err
	}
	if a.role.WorksJobs() && a.role.TakesWebhooks() {
		a.payloads = ledger.NewPayloads(ledger.PayloadsBytes, ledger.PayloadsAge)
	}
	var err error
	if a.sealer, err = sealerOf(a.cfg); err != nil {
		return err
	}
	workers := 0
	if a.role.WorksJobs() {
		workers = a.cfg.Workers
	}
	a.river, err = ledger.NewRiver(a.db, a.listener, ledger.RiverOptions{
		Workers:       workers,
		Registry:      a.registry,
		Logger:        a.log,
		Metrics:       a.metrics,
		Retention:     retentionOf(a.cfg),
		Middleware:    a.riverMiddleware(),
		ApplyLinger:   a.cfg.ApplyLinger,
		SweepInterval: a.cfg.SweepInterval,
		Payloads:      a.payloads,
		Sealer:        a.sealer,
	})
	if err != nil {
		return err
	}
	a.store = ledger.NewStore(a.db, a.river, ledger.StoreOptions{
		LogOnly: a.cfg.ClaimMode == config.ClaimLogOnly, Middleware: a.riverMiddleware(), Payloads: a.payloads, Sealer: a.sealer,
	})
	a.metrics.Registry.MustRegister(ledger.NewCollector(a.store), buildInfo())
	if a.role.TakesWebhooks() {
		if err := a.buildReceiver(); err != nil {
			return err
		}
	}
	if token := a.cfg.AdminToken.Reveal(); token != "" {
		a.riverUI, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(a.river, nil),
			Logger:    ledger.SlogLogger(a.log.Named("riverui")),
			Prefix:    "/riverui",
		})
		if err != nil {
			return fmt.Errorf("River UI: %w", err)
		}
	}
	if err := a.buildServers(); err != nil {
		return err
	}
	a.buildHTTP(a.engine, a.metricsEngine)
	return nil
}

// buildReceiver makes what POST /webhooks/<source> runs on: the delivery
// counts' writer, the sources, the claimer (group commit's committers,
// traced when tracing is on), the duplicates' comparison and the Redis
// gate. The committers and the comparison run until Close.
func (a *App) buildReceiver() error {
	a.stats = ledger.NewDeliveryStats(a.db)
	sources, err := a.sources()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	var claimer receiver.Claimer = a.store
	if a.cfg.GroupCommit {
		b := ledger.NewBatcher(ctx, a.store, a.cfg.ClaimCommitters, a.cfg.ClaimBatchMax)
		b.LateClaim = a.lateClaim
		claimer = b
	}
	if a.tracing != nil {
		claimer = tracedClaimer{Claimer: claimer, tracer: a.tracing.Tracer(tracerName)}
	}
	gate, err := a.shortCircuit()
	if err != nil {
		return err
	}
	a.webhooks = receiver.Config{
		ShortCircuit: gate,
		Sources:      sources,
		Claimer:      claimer,
		MaxBodyBytes: a.cfg.MaxBodyBytes,
		BodyBudget:   a.cfg.InflightBodyBytes,
		ClaimTimeout: a.cfg.ClaimTimeout,
		Metrics:      a.metrics,
		Stats:        a.stats,
		Duplicates:   receiver.NewDuplicateCheck(ctx, a.store, a.metrics, a.stats, a.log.Named("receiver")),
	}
	return nil
}

// buildServers makes the gin engines and the HTTP servers that serve
// them: HTTP_ADDR's, and METRICS_ADDR's with its listener when it is set.
func (a *App) buildServers() error {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	// The client address (allow_ips, logs) is the connection's, unless it
	// comes from a trusted proxy: then X-Forwarded-For, read from the right
	// past the trusted hops. gin trusts every proxy unless told otherwise.
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if err := e.SetTrustedProxies(a.cfg.TrustedProxies); err != nil {
		return fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	e.ContextWithFallback = true
	if a.tracing != nil {
		e.Use(traceRequests(a.tracing))
	}
	e.Use(web.Middleware(a.log.Named("http")), recovery(a.log))
	a.engine, a.server = e, a.httpServer(e, "http")
	a.server.IdleTimeout = 120 * time.Second
	if a.cfg.MetricsAddr == "" {
		return nil
	}
	m := gin.New()
	m.Use(web.Middleware(a.log.Named("metrics")), recovery(a.log))
	a.metricsEngine, a.metricsServer = m, a.httpServer(m, "metrics")
	var err error
	if a.metricsLn, err = net.Listen("tcp", a.cfg.MetricsAddr); err != nil {
		return fmt.Errorf("listen METRICS_ADDR %s: %w", a.cfg.MetricsAddr, err)
	}
	return nil
}

// httpServer serves h within the configured read timeouts, logging its
// errors under name.
func (a *App) httpServer(h http.Handler, name string) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: a.cfg.ReadHeaderTimeout,
		ReadTimeout:       a.cfg.ReadTimeout,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(a.log.Named(name)),
	}
}

// registerModules is where every feature module is wired in: one line each.
// A registration that went wrong (a job kind registered twice) fails
// NewRiver, and so New, in every role.
func (a *App) registerModules() {
	subscription.Register(a.registry, subscription.Config{DB: a.db, Metrics: a.metrics, StripeAPI: provider.StripeAPI{
		Base: a.cfg.StripeAPIBase, Key: a.cfg.StripeAPIKey.Reveal(), HTTP: &http.Client{Timeout: 5 * time.Second}}})
	payment.Register(a.registry, payment.Config{DB: a.db, Sender: payment.LogSender{Logger: a.log.Named("receipt")}})
	usage.Register(a.registry)
	thin.Register(a.registry, thin.Config{API: provider.StripeAPI{
		Base: a.cfg.StripeAPIBase, Key: a.cfg.StripeAPIKey.Reveal(), HTTP: &http.Client{Timeout: 10 * time.Second}}})
	branchhead.Register(a.registry)
	invoice.Register(a.registry)
	entitlement.Register(a.registry)
	if a.cfg.ReconcileInterval > 0 {
		replay.RegisterReconcile(a.registry, replay.ReconcileConfig{
			DB: a.db, Source: intakeSource(a.cfg, a.cfg.ReconcileSource, "stripe"),
			Stripe:   replay.StripeOptions{APIBase: a.cfg.StripeAPIBase, APIKey: a.cfg.StripeAPIKey.Reveal()},
			Interval: a.cfg.ReconcileInterval, Window: a.cfg.ReconcileWindow, Logger: a.log.Named("reconcile"),
			Middleware: a.riverMiddleware(),
		})
	}
	a.registerDrift()
	a.registerAlerts()
}

// intakeSource is the configured source called name, or an unconfigured
// one of providerName in its default namespace (replay and reconcile need
// no secret).
func intakeSource(cfg *config.Config, name, providerName string) *intake.Source {
	p, _ := provider.Lookup(providerName)
	src := &intake.Source{Name: name, Namespace: providerName, Provider: p, BodyDedup: true}
	if s, ok := cfg.Source(name); ok {
		src.Namespace, src.BodyDedup = s.Namespace, s.BodyDedup
	}
	return src
}

func (a *App) openDatabase(ctx context.Context) error {
	var tracer pgx.QueryTracer
	if a.tracing != nil {
		tracer = pgxTracer{tracer: a.tracing.Tracer(tracerName)}
	}
	var err error
	if a.pool, err = openPool(ctx, a.cfg, tracer); err != nil {
		return err
	}
	a.db = stdlib.OpenDBFromPool(a.pool)
	if !a.role.WorksJobs() {
		return nil
	}
	// River's LISTEN holds one session for good: through a transaction
	// pooler it needs the direct URL, and without one River polls.
	lcfg := a.pool.Config()
	if a.cfg.DatabasePooler == config.PoolerTransaction {
		if a.cfg.DatabaseDirectURL == "" {
			return nil
		}
		if lcfg, err = poolConfig(a.cfg.DatabaseDirectURL.Reveal(), config.PoolerNone); err != nil {
			return fmt.Errorf("DATABASE_DIRECT_URL: %w", err)
		}
	}
	lcfg.MaxConns = 1
	if a.listener, err = pgxpool.NewWithConfig(ctx, lcfg); err != nil {
		return fmt.Errorf("listener pool: %w", err)
	}
	return nil
}

// openPool opens the pgx pool on DATABASE_URL, of DB_MAX_CONNS
// connections, and checks that the database answers; a tracer, when not
// nil, traces every statement.
func openPool(ctx context.Context, cfg *config.Config, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pcfg, err := poolConfig(cfg.DatabaseURL.Reveal(), cfg.DatabasePooler)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.DBMaxConns)
	pcfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s: %w", config.RedactURL(cfg.DatabaseURL.Reveal()), err)
	}
	return pool, nil
}

// poolConfig parses a database URL. Behind a transaction pooler, queries
// run without named prepared statements (pgx's exec mode: one round trip,
// parameter types from the Go values), since the next statement may reach
// another server connection; a default_query_exec_mode in the URL wins.
// A multi-host URL with target_session_attrs=read-write reaches whichever
// host is the primary, so a failed-over cluster is found again.
func poolConfig(rawURL string, pooler config.DatabasePooler) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, err
	}
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if pooler == config.PoolerTransaction && !strings.Contains(rawURL, "default_query_exec_mode") {
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return pcfg, nil
}

// readFingerprintKey reads the deployment's fingerprint key, which the
// first process to start writes. A database whose migrations are not
// current may have no place for it yet: then there is none, and serve's
// migration check refuses to start, with the reason.
func (a *App) readFingerprintKey(ctx context.Context) error {
	key, err := ledger.FingerprintKey(ctx, a.db)
	if err != nil {
		if st, checkErr := migrations.Check(ctx, a.db); checkErr == nil && !st.Current() {
			return nil
		}
		return err
	}
	a.fingerprintKey = key
	return nil
}

// secretFingerprints is the fingerprint of each of s's secrets (and
// public keys), computed once per process: the receiver records the one
// that matched, and the console names them.
func (a *App) secretFingerprints(s config.Source) []string {
	if fp, ok := a.fingerprints[s.Name]; ok {
		return fp
	}
	fp := make([]string, len(s.Secrets))
	for i, sec := range s.Secrets {
		fp[i] = provider.SecretFingerprint(a.fingerprintKey, []byte(sec.Reveal()))
	}
	if a.fingerprints == nil {
		a.fingerprints = map[string][]string{}
	}
	a.fingerprints[s.Name] = fp
	return fp
}

// maxBodyBytes is the body limit of a source of p: MAX_BODY_BYTES when
// set, else the provider's documented maximum payload where that is
// larger than the default, within the in-flight budget.
func (a *App) maxBodyBytes(p *provider.Provider) int64 {
	if a.cfg.MaxBodyBytesSet {
		return a.cfg.MaxBodyBytes
	}
	return min(max(a.cfg.MaxBodyBytes, p.MaxBodyBytes), a.cfg.InflightBodyBytes)
}

func (a *App) sources() ([]receiver.Source, error) {
	var (
		out []receiver.Source
		err error
	)
	for _, s := range a.cfg.Sources {
		p, ok := provider.Lookup(s.Provider)
		if !ok {
			return nil, fmt.Errorf("source %s: unknown provider %q (known: %v)", s.Name, s.Provider, provider.Names())
		}
		secrets := make([][]byte, len(s.Secrets))
		for i, sec := range s.Secrets {
			secrets[i] = []byte(sec.Reveal())
		}
		src := receiver.Source{Source: intake.Source{Name: s.Name, Namespace: s.Namespace, Provider: p, BodyDedup: s.BodyDedup},
			Secrets: secrets, Fingerprints: a.secretFingerprints(s), Tolerance: s.Tolerance, ReplayToken: a.cfg.ReplayTokenOf(s).Reveal(),
			MaxBodyBytes: a.maxBodyBytes(p)}
		if src.AllowIPs, err = a.allowList(s); err != nil {
			return nil, err
		}
		if f := s.IDFallback; f != nil {
			src.IDFallback = &provider.IDFallback{Header: f.Header, JSONPath: f.JSONPath, HashFields: f.HashFields}
		}
		if p == provider.Standard {
			for i, sec := range secrets {
				if err := provider.CheckStandardKey(string(sec)); err != nil {
					return nil, fmt.Errorf("source %s: key %d (secrets, then public keys): %w", s.Name, i, err)
				}
			}
		}
		out = append(out, src)
	}
	return out, nil
}

// Handler is the process's HTTP handler.
func (a *App) Handler() http.Handler { return a.engine }

// MetricsAddr is the address /metrics is served on when METRICS_ADDR is
// set, else "".
func (a *App) MetricsAddr() string {
	if a.metricsLn == nil {
		return ""
	}
	return a.metricsLn.Addr().String()
}

// Run serves on HTTP_ADDR until ctx ends, then shuts down gracefully.
func (a *App) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.HTTPAddr, err)
	}
	return a.Serve(ctx, ln)
}

// Serve works jobs (roles all and worker) and serves HTTP on ln until ctx
// ends. Shutdown stops accepting, finishes in-flight requests, soft-stops
// the workers (cancelling what is still running after the budget) and
// returns; Close then releases the pools.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	if a.role.WorksJobs() {
		if err := a.river.Start(context.WithoutCancel(ctx)); err != nil {
			ln.Close()
			return fmt.Errorf("start workers: %w", err)
		}
	}
	if a.riverUI != nil {
		if err := a.riverUI.Start(ctx); err != nil {
			ln.Close()
			return fmt.Errorf("start River UI: %w", err)
		}
	}
	srv, msrv := a.server, a.metricsServer
	a.log.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("role", string(a.role)))
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	if msrv != nil {
		a.log.Info("serving metrics", zap.String("addr", a.metricsLn.Addr().String()))
		go func() { errc <- msrv.Serve(a.metricsLn) }()
	}

	statsCtx, stopStats := context.WithCancel(context.Background())
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		if a.stats != nil {
			a.stats.Run(statsCtx, ledger.StatFlushInterval, a.log.Named("stats"))
		}
	}()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		a.log.Warn("http shutdown", zap.Error(err))
	}
	// Every answer is counted now: the last flush writes them.
	stopStats()
	<-statsDone
	if msrv != nil {
		if err := msrv.Shutdown(sctx); err != nil {
			a.log.Warn("metrics shutdown", zap.Error(err))
		}
	}
	if a.role.WorksJobs() {
		a.stopWorkers()
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

func (a *App) stopWorkers() {
	sctx, cancel := context.WithTimeout(context.Background(), softStopTimeout)
	defer cancel()
	if err := a.river.Stop(sctx); err != nil {
		a.log.Warn("workers did not stop in time; cancelling running jobs", zap.Error(err))
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer hcancel()
		if err := a.river.StopAndCancel(hctx); err != nil {
			a.log.Warn("workers stop", zap.Error(err))
		}
	}
}

// Close releases the database pools.
func (a *App) Close() {
	if a.stop != nil {
		a.stop()
	}
	if a.metricsLn != nil {
		a.metricsLn.Close()
	}
	_ = a.gate.Close()
	if a.db != nil {
		a.db.Close()
	}
	if a.listener != nil {
		a.listener.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
	if a.stopTracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.stopTracing(ctx); err != nil {
			a.log.Warn("flush traces", zap.Error(err))
		}
	}
}

// sealerOf is the payload encryption PAYLOAD_KEYS asks for; nil when unset.
func sealerOf(cfg *config.Config) (*ledger.Sealer, error) {
	keys := make([][]byte, len(cfg.PayloadKeys))
	for i, k := range cfg.PayloadKeys {
		var err error
		if keys[i], err = base64.StdEncoding.DecodeString(k.Reveal()); err != nil {
			return nil, fmt.Errorf("PAYLOAD_KEYS: key %d: %w", i+1, err)
		}
	}
	s, err := ledger.NewSealer(keys)
	if err != nil {
		return nil, fmt.Errorf("PAYLOAD_KEYS: %w", err)
	}
	return s, nil
}
