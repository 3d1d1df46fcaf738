package app

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/receiver"
	"github.com/hookledger/hookledger/modules/core/web"
	"github.com/hookledger/hookledger/modules/operations/admin"
	"github.com/hookledger/hookledger/modules/operations/console"
	"github.com/hookledger/hookledger/modules/operations/failure"
)

// buildHTTP lists every route the process serves: it mounts handlers on
// e, the HTTP_ADDR engine, and m, METRICS_ADDR's (nil when unset), over
// the parts build made.
func (a *App) buildHTTP(e, m *gin.Engine) {
	// Routes match the path as sent, and a parameter is unescaped after:
	// an event id holding '/' is reached as /admin/events/evt_a%2Fb, where
	// the decoded path would have one segment too many.
	e.UseRawPath = true
	e.UnescapePathValues = true
	e.NoRoute(func(c *gin.Context) { c.JSON(http.StatusNotFound, gin.H{"error": "not found"}) })
	e.NoMethod(func(c *gin.Context) { c.JSON(http.StatusMethodNotAllowed, gin.H{"error": "method not allowed"}) })
	e.GET("/healthz", healthz)
	if m == nil {
		e.GET("/readyz", a.readyz(true))
		e.GET("/metrics", a.metricsRoute()...)
	} else {
		// The public port says only whether it is ready; volumes, source
		// names and the schema version are on the metrics listener.
		e.GET("/readyz", a.readyz(false))
		m.GET("/healthz", healthz)
		m.GET("/readyz", a.readyz(true))
		m.GET("/metrics", a.metricsRoute()...)
	}
	if token := a.cfg.AdminToken.Reveal(); token != "" {
		names := make([]string, len(a.cfg.Sources))
		for i, s := range a.cfg.Sources {
			names[i] = s.Name
		}
		// One throttle for every surface behind the admin token: a guesser
		// gets no more tries by spreading them over the console and the API.
		throttle := admin.NewThrottle()
		admin.Routes(e, admin.Config{
			Token: token, Ledger: a.store, Metrics: a.metrics, Sources: names, Stats: a.stats, RiverUI: a.riverUI, Throttle: throttle,
		})
		groups := failure.New(a.db, a.store)
		failure.Routes(e, admin.Auth(token, a.metrics, throttle), groups)
		console.Routes(e, console.Config{
			Auth: admin.Auth(token, a.metrics, throttle), CSRFToken: admin.CSRFToken(token), CSRFField: admin.CSRFField,
			Ledger: a.store, DB: a.db, Stats: a.stats, Sources: a.consoleSources(),
			LogOnly: a.cfg.ClaimMode == config.ClaimLogOnly, RiverUI: "/riverui", Failures: consoleFailures{groups},
			Sessions: admin.NewSessions(token, a.metrics, throttle),
		})
	}
	if a.role.TakesWebhooks() {
		// Wrong replay tokens are counted as wrong admin tokens are, in a
		// throttle of their own: a replay token guesser gets 20 answers,
		// then one every 3 s, and the right token is never throttled.
		webhooks := a.webhooks
		webhooks.ReplayThrottle = admin.NewThrottle()
		receiver.Routes(e, webhooks)
	}
}

// lateClaim counts a claim that committed after its delivery was answered
// 503, so the claimed count matches the ledger's rows.
func (a *App) lateClaim(c ledger.Claim) {
	a.metrics.LateClaims.WithLabelValues(c.Source).Inc()
	a.stats.Tally(c.Source, ledger.StatLateClaim)
	a.stats.TallySecret(c)
	a.log.Info("claim committed after its delivery was answered 503: the provider's retry will be a duplicate",
		zap.String("source", c.Source), zap.String("namespace", c.Namespace), zap.String("event_id", c.EventID))
}

// consoleSources is what the console shows of the sources: names,
// providers and their secrets' fingerprints, never the secrets.
func (a *App) consoleSources() []console.Source {
	out := make([]console.Source, len(a.cfg.Sources))
	for i, s := range a.cfg.Sources {
		out[i] = console.Source{Name: s.Name, Provider: s.Provider, Fingerprints: a.secretFingerprints(s)}
	}
	return out
}

func healthz(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) }

// metricsRoute is /metrics' handler chain: behind METRICS_TOKEN when set.
func (a *App) metricsRoute() []gin.HandlerFunc {
	h := gin.WrapH(promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{}))
	if token := a.cfg.MetricsToken.Reveal(); token != "" {
		return []gin.HandlerFunc{admin.Auth(token, a.metrics, nil), h}
	}
	return []gin.HandlerFunc{h}
}

// readyz answers 200 when the database answers and its migrations are
// current; detailed adds the schema version.
func (a *App) readyz(detailed bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		st, err := migrations.Check(ctx, a.db)
		switch {
		case err != nil:
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": "database unreachable"})
		case !st.Current() && detailed:
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": "migrations not current", "version": st.Version, "latest": st.Latest, "dirty": st.Dirty})
		case !st.Current():
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": "migrations not current"})
		case detailed:
			c.JSON(http.StatusOK, gin.H{"status": "ready", "version": st.Version})
		default:
			c.JSON(http.StatusOK, gin.H{"status": "ready"})
		}
	}
}

// recovery turns a panic into a 500 and logs it once.
func recovery(log *zap.Logger) gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, err any) {
		web.Logger(c).Error("panic serving request", zap.Any("panic", err), zap.Stack("stack"))
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "internal error"})
	})
}
