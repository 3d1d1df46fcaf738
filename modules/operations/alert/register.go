package alert

import (
	"net/http"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Config turns alerts on.
type Config struct {
	// URL is ALERT_WEBHOOK_URL; Secret ALERT_WEBHOOK_SECRET.
	URL, Secret string
	// Interval is ALERT_CHECK_INTERVAL.
	Interval time.Duration
	Rules    *Rules
	Logger   *zap.Logger
	// HTTP delivers the messages; nil is a client with a 10 s timeout.
	HTTP *http.Client
}

// Register adds the check and the notify workers to r, and the check as a
// periodic job of the elected leader, run at start and every
// cfg.Interval.
func Register(r *ledger.Registry, cfg Config) {
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	cfg.Rules.orphansSeen = -1
	ledger.AddWorker(r, &CheckWorker{DB: cfg.Rules.DB, Rules: cfg.Rules, Logger: cfg.Logger})
	ledger.AddWorker(r, &NotifyWorker{URL: cfg.URL, Secret: cfg.Secret, HTTP: cfg.HTTP})
	r.AddPeriodic(river.NewPeriodicJob(river.PeriodicInterval(cfg.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return CheckArgs{}, &river.InsertOpts{MaxAttempts: 1} },
		&river.PeriodicJobOpts{RunOnStart: true}))
}
