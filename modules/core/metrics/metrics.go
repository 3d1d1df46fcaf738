// Package metrics holds hookledger's Prometheus collectors. app builds one
// Set and hands it to whatever counts something; /metrics serves its
// registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Delivery outcomes, the values of hookledger_deliveries_total{outcome}.
const (
	OutcomeClaimed          = "claimed"
	OutcomeDuplicate        = "duplicate"
	OutcomeInvalidSignature = "invalid_signature"
	OutcomeBadRequest       = "bad_request"
	OutcomeTooLarge         = "too_large"
	OutcomeUnavailable      = "unavailable"
	OutcomeError            = "error"
	OutcomeNotFound         = "not_found"
)

// Set is every collector hookledger exports.
type Set struct {
	Registry *prometheus.Registry

	Deliveries   *prometheus.CounterVec
	ClaimSeconds *prometheus.HistogramVec
	Applies      *prometheus.CounterVec
	ApplySeconds *prometheus.HistogramVec
	StaleSkipped *prometheus.CounterVec
	VersionTies  *prometheus.CounterVec
	WouldSkip    *prometheus.CounterVec
	// SignatureFailures counts refused signatures by reason, which the
	// client is never told.
	SignatureFailures *prometheus.CounterVec
	// BodyBytesInFlight is the request-body budget in use.
	BodyBytesInFlight prometheus.Gauge
	// AdminRefusals counts admin, River UI and token-guarded /metrics
	// requests refused, by reason (unauthorized, cross_site).
	AdminRefusals *prometheus.CounterVec
	// AllowlistRefusals counts deliveries refused with 403 by a source's
	// allow_ips; PublishedIPs reports each published address list's age
	// and whether it is older than PUBLISHED_IPS_MAX_AGE.
	AllowlistRefusals *prometheus.CounterVec
	PublishedIPs      *PublishedLists
	// LateClaims counts claims that committed after their delivery was
	// answered 503; DuplicateMismatches counts duplicates whose body
	// differs from the stored one.
	LateClaims          *prometheus.CounterVec
	DuplicateMismatches *prometheus.CounterVec
	// DriftObjects is the objects the last scheduled drift check found
	// drifted, by kind (DRIFT_INTERVAL).
	DriftObjects *prometheus.GaugeVec
	// LedgerOrphans counts the claimed events the ledger's sweep found
	// with no live apply job in River, by what it did (new_job, failed).
	LedgerOrphans *prometheus.CounterVec
	// PayloadsUnreadable is how many of the newest stored payloads name a
	// key PAYLOAD_KEYS lacks, as start-up found them.
	PayloadsUnreadable prometheus.Gauge
}

// New registers a fresh Set, with Go runtime and process collectors.
func New() *Set {
	s := &Set{
		Registry: prometheus.NewRegistry(),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_deliveries_total",
			Help: "Webhook deliveries by configured source and outcome.",
		}, []string{"source", "outcome"}),
		ClaimSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookledger_claim_duration_seconds",
			Help:    "Time to commit a claim and its apply job.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"source"}),
		Applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_applies_total",
			Help: "Apply attempts by provider, event type and outcome (settled, failed, skipped).",
		}, []string{"provider", "event_type", "outcome"}),
		ApplySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookledger_apply_duration_seconds",
			Help:    "Time of one apply transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"provider"}),
		StaleSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_stale_skipped_total",
			Help: "Events whose state was older than the stored version and left it untouched.",
		}, []string{"table"}),
		VersionTies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_version_ties_total",
			Help: "Events that carried the stored version exactly, by how the tie was resolved (applied, kept).",
		}, []string{"table", "resolution"}),
		WouldSkip: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_log_only_would_skip_total",
			Help: "Duplicates applied again because CLAIM_MODE=log-only.",
		}, []string{"source"}),
		SignatureFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_signature_failures_total",
			Help: "Deliveries refused with 401, by configured source and reason (missing, malformed, mismatch, stale, future, no_secret).",
		}, []string{"source", "reason"}),
		BodyBytesInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_body_bytes_in_flight",
			Help: "Request-body bytes reserved by deliveries being read or claimed (bounded by MAX_INFLIGHT_BODY_BYTES).",
		}),
		AdminRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_admin_refusals_total",
			Help: "Admin, River UI and token-guarded /metrics requests refused, by reason (unauthorized, cross_site).",
		}, []string{"reason"}),
		AllowlistRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_allowlist_refusals_total",
			Help: "Deliveries refused with 403 because the client address is not in the source's allow_ips.",
		}, []string{"source"}),
		LateClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_late_claims_total",
			Help: "Claims that committed after their request stopped waiting (the sender hung up, or the deadline passed as it committed) and was answered 503: the row exists, and the provider's retry is a duplicate.",
		}, []string{"source"}),
		DuplicateMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_duplicate_mismatch_total",
			Help: "Duplicates (same event id) whose body differs from the stored one beyond the provider's per-attempt fields; the stored body is kept.",
		}, []string{"source"}),
		PublishedIPs: NewPublishedLists(),
		DriftObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookledger_drift_objects",
			Help: "Objects whose stored row differs from the provider's (missing here, missing at the provider, or in some fields) at the last scheduled drift check (DRIFT_INTERVAL) this process ran, by kind.",
		}, []string{"kind"}),
		LedgerOrphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_ledger_orphans",
			Help: "Claimed events the ledger's sweep found with no live apply job in River (cancelled or deleted in River UI, given up on by the rescuer, lost), by what it did: new_job (the job was gone) or failed (River stopped it; the reason is on the row).",
		}, []string{"action"}),
		PayloadsUnreadable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_payloads_unreadable",
			Help: "Stored payloads among the 1,000 newest rows sealed by a key PAYLOAD_KEYS lacks, counted at start-up; their events fail to apply until the key is back. hookledger payloads check lists every payload no key opens.",
		}),
	}
	s.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		s.Deliveries, s.ClaimSeconds, s.Applies, s.ApplySeconds, s.StaleSkipped, s.VersionTies, s.WouldSkip,
		s.SignatureFailures, s.BodyBytesInFlight, s.AdminRefusals,
		s.AllowlistRefusals, s.PublishedIPs, s.LateClaims, s.DuplicateMismatches,
		s.DriftObjects, s.LedgerOrphans, s.PayloadsUnreadable,
	)
	return s
}
