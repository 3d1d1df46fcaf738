package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/alert"
	"github.com/hookledger/hookledger/modules/operations/failure"
)

// registerAlerts turns alerts on when ALERT_WEBHOOK_URL is set: the
// leader's check of the rules over the ledger, the failure groups, the
// delivery counts and this process's sweep, and the delivery of each
// change.
func (a *App) registerAlerts() {
	url := a.cfg.AlertWebhookURL.Reveal()
	if url == "" {
		return
	}
	orphans, drift := prometheus.NewRegistry(), prometheus.NewRegistry()
	orphans.MustRegister(a.metrics.LedgerOrphans)
	drift.MustRegister(a.metrics.DriftObjects)
	alert.Register(a.registry, alert.Config{
		URL: url, Secret: a.cfg.AlertWebhookSecret.Reveal(), Interval: a.cfg.AlertCheckInterval, Logger: a.log.Named("alert"),
		Rules: &alert.Rules{
			DB: a.db,
			// The store is built after the modules register; the rules
			// run only once it is.
			Backlog: func(ctx context.Context) (ledger.Backlog, error) { return a.store.Backlog(ctx) },
			GroupsFunc: func(ctx context.Context) ([]alert.Group, error) {
				r, err := failure.New(a.db, a.store).List(ctx)
				out := make([]alert.Group, len(r.Groups))
				for i, g := range r.Groups {
					out[i] = alert.Group{ID: g.ID, Count: g.Count, Source: g.Source, Handler: g.Handler, Error: g.Error, FirstFailedAt: g.FirstFailedAt}
				}
				return out, err
			},
			OrphansFunc:       func() float64 { return counted(orphans) },
			DriftFunc:         func() float64 { return counted(drift) },
			OldestPending:     a.cfg.AlertOldestPending,
			FailedAge:         a.cfg.AlertFailedAge,
			SignatureFailures: a.cfg.AlertSignatureFailures,
		},
	})
}

// counted sums every counter and gauge g gathers.
func counted(g prometheus.Gatherer) float64 {
	families, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
