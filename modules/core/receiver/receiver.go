// Package receiver serves POST /webhooks/<source>: it refuses clients
// outside a source's allow list, reads the body within the limit, verifies
// the signature (or the replay token) before any database access, has
// intake turn the delivery into its claim, and answers what the claim did;
// the 2xx goes out only after the claim and its apply job are committed.
package receiver

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/core/shortcircuit"
	"github.com/hookledger/hookledger/modules/core/web"
)

// Source is a configured endpoint: its identity in the ledger and what
// the receiver checks before it claims a delivery.
type Source struct {
	intake.Source
	Secrets [][]byte
	// Fingerprints names each of Secrets (provider.SecretFingerprint), in
	// the same order; the claim records the one that matched.
	Fingerprints []string
	// Tolerance < 0 means the provider's default; 0 turns the check off.
	Tolerance time.Duration
	// ReplayToken lets a replay skip signature verification on this source;
	// honoured only when the provider is Replayable (Stripe, Paddle: the
	// providers whose replay re-posts events with the token). Empty: no
	// replay through HTTP.
	ReplayToken string
	// AllowIPs, when set, refuses clients outside it with 403 before the
	// body is read.
	AllowIPs *provider.AllowList
	// MaxBodyBytes is the source's body limit; zero means Config's.
	MaxBodyBytes int64
}

// Throttle counts a wrong token from a client address: wait is 0 while
// the client had a failure left (answer as usual; last: that was its last
// one), else how long until it earns one back (answer 429).
// *admin.Throttle is the one in use.
type Throttle interface {
	Fail(addr netip.Addr) (wait time.Duration, last bool)
}

// Claimer claims a verified event; *ledger.Store and *ledger.Batcher are
// the ones in use. Its result decides the answer, so the claim mode is
// the claimer's alone.
type Claimer interface {
	Claim(ctx context.Context, in ledger.Claim) (ledger.ClaimResult, error)
}

// Config holds the receiver's dependencies.
type Config struct {
	Sources []Source
	Claimer Claimer
	// MaxBodyBytes is the body limit of a source that sets none.
	MaxBodyBytes int64
	// BodyBudget bounds the body bytes all in-flight deliveries hold
	// together, reserved as they arrive, and divides them (budget): a
	// slice kept for small bodies, shared out among the sources, a slice
	// kept for clients in their source's allow_ips, and the rest, of which
	// one source holds at most half; one client address holds at most a
	// quarter. A delivery that does not fit gets 503 with Retry-After.
	BodyBudget   int64
	ClaimTimeout time.Duration
	Metrics      *metrics.Set
	// ShortCircuit answers duplicates with a fresh Redis marker before
	// the claim (REDIS_URL); nil means no Redis, as under
	// CLAIM_MODE=log-only, which applies every duplicate again.
	ShortCircuit *shortcircuit.Gate
	// Stats counts every answer per source and minute for delivery_stat.
	Stats *ledger.DeliveryStats
	// Duplicates compares the ledger's duplicates with the stored bodies;
	// nil compares none.
	Duplicates *DuplicateCheck
	// ReplayThrottle counts wrong replay tokens per client address; a
	// client that has spent its failures gets 429 with Retry-After for its
	// wrong tokens. The token is compared first, so the right one is never
	// throttled. app hands it the admin token's kind of throttle (its own
	// counts); nil counts nothing.
	ReplayThrottle Throttle
	// NowFunc is the clock for timestamp checks; time.Now when nil.
	NowFunc func() time.Time

	// bodyGrace and bodyMinRate, when set, replace the grace period and
	// the minimum data rate of request bodies.
	bodyGrace   time.Duration
	bodyMinRate int64
}

// Routes mounts the webhook endpoint.
func Routes(r gin.IRouter, cfg Config) {
	r.POST("/webhooks/:source", newHandler(cfg).receive)
}

func newHandler(cfg Config) *handler {
	h := &handler{cfg: cfg, sources: map[string]*Source{}}
	shares := make([]budgetSource, 0, len(cfg.Sources))
	for i := range cfg.Sources {
		src := cfg.Sources[i] // a copy: the limit is filled in here
		src.MaxBodyBytes = cmp.Or(src.MaxBodyBytes, cfg.MaxBodyBytes)
		shares = append(shares, budgetSource{name: src.Name, limit: src.MaxBodyBytes, trusted: src.AllowIPs != nil})
		h.sources[src.Name] = &src
	}
	h.body = &bodyReader{
		budget:  newBudget(cfg.BodyBudget, shares, cfg.Metrics.BodyBytesInFlight),
		grace:   cmp.Or(cfg.bodyGrace, bodyGrace),
		minRate: cmp.Or(cfg.bodyMinRate, bodyMinRate),
	}
	if h.cfg.NowFunc == nil {
		h.cfg.NowFunc = time.Now
	}
	return h
}

type handler struct {
	cfg     Config
	sources map[string]*Source
	body    *bodyReader
}

// unauthorized is the one 401 body, whatever the reason: the reason goes
// to the log and to hookledger_signature_failures_total, never to the
// client, who could otherwise probe the verifier.
var unauthorized = Response{Error: "invalid or missing signature"}

// Response is the JSON answer to a delivery.
type Response struct {
	Status  string `json:"status,omitempty"`
	EventID string `json:"event_id,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (h *handler) receive(c *gin.Context) {
	log := web.Logger(c)
	src, ok := h.sources[c.Param("source")]
	if !ok {
		h.answer(c, "unknown", metrics.OutcomeNotFound, http.StatusNotFound, Response{Error: "unknown webhook source"})
		return
	}
	log = log.WithLazy(zap.String("source", src.Name))
	if src.AllowIPs != nil && !src.AllowIPs.Allows(c.ClientIP()) {
		log.Info("client address not in allow_ips", zap.String("client_ip", c.ClientIP()))
		h.cfg.Metrics.AllowlistRefusals.WithLabelValues(src.Name).Inc()
		h.cfg.Stats.Tally(src.Name, ledger.StatForbidden)
		c.JSON(http.StatusForbidden, Response{Error: "client address not allowed"})
		return
	}
	if h.throttled(c, src) {
		return
	}

	body, release, err := h.body.read(c.Writer, c.Request, c.ClientIP(), src.Name, src.AllowIPs != nil, src.MaxBodyBytes)
	defer release()
	if err != nil {
		// Whatever is left of the body is not read: the connection closes
		// after the answer.
		c.Header("Connection", "close")
		var tooLarge *http.MaxBytesError
		switch {
		case errors.Is(err, errOverBudget), errors.Is(err, errClientOverBudget), errors.Is(err, errSourceOverBudget):
			log.Warn(err.Error(), zap.String("client_ip", c.ClientIP()), zap.Int64("content_length", c.Request.ContentLength))
			c.Header("Retry-After", "1")
			h.answer(c, src.Name, metrics.OutcomeUnavailable, http.StatusServiceUnavailable, Response{Error: "too many request bodies in flight, retry later"})
		case errors.As(err, &tooLarge):
			h.answer(c, src.Name, metrics.OutcomeTooLarge, http.StatusRequestEntityTooLarge,
				Response{Error: "body exceeds " + strconv.FormatInt(src.MaxBodyBytes, 10) + " bytes"})
		case errors.Is(err, errTooSlow), errors.Is(err, os.ErrDeadlineExceeded):
			log.Info("request body too slow", zap.String("client_ip", c.ClientIP()), zap.Error(err))
			h.answer(c, src.Name, metrics.OutcomeBadRequest, http.StatusRequestTimeout, Response{Error: "request body too slow"})
		default:
			h.answer(c, src.Name, metrics.OutcomeBadRequest, http.StatusBadRequest, Response{Error: "could not read body"})
		}
		return
	}

	var verified *provider.Verification
	now := h.cfg.NowFunc()
	if !replayed(c, src) {
		v, err := src.Provider.Verify(c.Request.Header, body, src.Secrets, now, src.Tolerance)
		if err != nil {
			reason := provider.ReasonOf(err)
			log.Info("signature rejected", zap.String("reason", string(reason)), zap.Error(err))
			h.cfg.Metrics.SignatureFailures.WithLabelValues(src.Name, string(reason)).Inc()
			h.answer(c, src.Name, metrics.OutcomeInvalidSignature, http.StatusUnauthorized, unauthorized)
			return
		}
		verified = &v
	}
	claim, ev, err := src.Prepare(c.Request.Header, body, verified, now)
	if err != nil {
		h.answer(c, src.Name, metrics.OutcomeBadRequest, http.StatusBadRequest, Response{Error: err.Error()})
		return
	}
	if verified != nil && verified.SecretIndex < len(src.Fingerprints) {
		claim.SecretFingerprint = src.Fingerprints[verified.SecretIndex]
	}
	identity := src.Provider.BodyIdentity(body)
	claim.BodyIdentity = identity[:]
	if ev.Ignore {
		c.JSON(http.StatusOK, ev.Reply)
		return
	}
	log = log.WithLazy(zap.String("event_id", ev.ID), zap.String("event_type", ev.Type))

	// A replay never asks Redis: it exists to bring back what the ledger
	// may lack, and only the ledger can say.
	if !claim.Replayed && h.cfg.ShortCircuit.Seen(c.Request.Context(), src.Name, claim.Namespace, claim.EventID) {
		h.answer(c, src.Name, metrics.OutcomeDuplicate, http.StatusOK, Response{Status: "duplicate", EventID: ev.ID})
		return
	}

	ctx, cancel := context.WithTimeout(c.Request.Context(), h.cfg.ClaimTimeout)
	defer cancel()
	start := time.Now()
	res, err := h.cfg.Claimer.Claim(ctx, claim)
	h.cfg.Metrics.ClaimSeconds.WithLabelValues(src.Name).Observe(time.Since(start).Seconds())
	if err == nil && (res == ledger.Claimed || (res == ledger.Duplicate && claim.BodyDigest == "")) {
		// The ledger holds the event now (a duplicate on the body digest
		// alone may hold another id: no marker for it).
		h.cfg.ShortCircuit.Mark(claim.Namespace, claim.EventID)
	}
	if err == nil && res != ledger.Claimed {
		h.cfg.Duplicates.add(src.Name, src.Provider, ledger.EventKey{Namespace: claim.Namespace, EventID: claim.EventID}, identity)
	}
	switch {
	case err == nil && res == ledger.Claimed:
		h.cfg.Stats.TallySecret(claim)
		log.Named("feed").Info("--> "+ev.Type+" "+ev.ID+" claimed", zap.Bool("replayed", claim.Replayed))
		h.answer(c, src.Name, metrics.OutcomeClaimed, http.StatusOK, Response{Status: "claimed", EventID: ev.ID})
	case err == nil && res.WouldSkip():
		h.cfg.Metrics.WouldSkip.WithLabelValues(src.Name).Inc()
		if res == ledger.DuplicateReapplied {
			log.Warn("duplicate delivery: would skip; applying again (CLAIM_MODE=log-only)", zap.Bool("replayed", claim.Replayed))
		} else {
			log.Warn("duplicate delivery (the body of another event): would skip; nothing of its own to apply again (CLAIM_MODE=log-only)", zap.Bool("replayed", claim.Replayed))
		}
		h.count(c, src.Name, metrics.OutcomeDuplicate, true)
		c.JSON(http.StatusOK, Response{Status: "duplicate", EventID: ev.ID})
	case err == nil:
		log.Named("feed").Info("--> "+ev.Type+" "+ev.ID+" duplicate", zap.Bool("replayed", claim.Replayed))
		h.answer(c, src.Name, metrics.OutcomeDuplicate, http.StatusOK, Response{Status: "duplicate", EventID: ev.ID})
	case ledger.IsBadData(err):
		log.Info("payload refused by the database", zap.Error(err))
		h.answer(c, src.Name, metrics.OutcomeBadRequest, http.StatusBadRequest, Response{Error: "payload cannot be stored as jsonb"})
	case ledger.IsUnavailable(err) || ctx.Err() != nil:
		log.Warn("claim unavailable", zap.Error(err))
		h.answer(c, src.Name, metrics.OutcomeUnavailable, http.StatusServiceUnavailable, Response{Error: "ledger unavailable, retry later"})
	default:
		log.Error("claim failed", zap.Error(err))
		h.answer(c, src.Name, metrics.OutcomeError, http.StatusInternalServerError, Response{Error: "internal error"})
	}
}

func (h *handler) answer(c *gin.Context, source, outcome string, status int, r Response) {
	h.count(c, source, outcome, false)
	c.JSON(status, r)
}

// count counts an answered delivery in the metrics and the delivery
// stats; wouldSkip is a duplicate that log-only lets through.
func (h *handler) count(c *gin.Context, source, outcome string, wouldSkip bool) {
	h.cfg.Metrics.Deliveries.WithLabelValues(source, outcome).Inc()
	src := h.sources[source]
	h.cfg.Stats.Add(source, outcome, src != nil && replayed(c, src), wouldSkip)
}

// throttled counts a wrong replay token (on a source that honours one)
// from the client's address, and answers 429 with Retry-After once the
// client has spent its failures; it is checked from the header alone,
// before the body is read. A wrong token the client could still afford
// goes on to signature verification, as before. The right token is
// compared first and never counted.
func (h *handler) throttled(c *gin.Context, src *Source) bool {
	if h.cfg.ReplayThrottle == nil || !honoursReplay(src) || c.GetHeader(intake.ReplayTokenHeader) == "" || replayed(c, src) {
		return false
	}
	addr, _ := netip.ParseAddr(c.ClientIP())
	wait, last := h.cfg.ReplayThrottle.Fail(addr)
	if last {
		web.Logger(c).Warn("replay token guessing throttled: too many wrong X-Replay-Token values", zap.String("source", src.Name), zap.String("client_ip", c.ClientIP()))
	}
	if wait == 0 {
		return false
	}
	h.cfg.Metrics.SignatureFailures.WithLabelValues(src.Name, "replay_token_throttled").Inc()
	c.Header("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	c.Header("Connection", "close") // the body is not read
	h.answer(c, src.Name, metrics.OutcomeInvalidSignature, http.StatusTooManyRequests,
		Response{Error: "too many wrong replay tokens from this address; retry after Retry-After seconds"})
	return true
}

// honoursReplay reports whether src takes X-Replay-Token at all: it has a
// token and its provider's replay re-posts events with it.
func honoursReplay(src *Source) bool {
	return src.ReplayToken != "" && src.Provider.Replayable
}

// replayed reports whether the request carries the source's replay token.
// The header is ignored on a source without a token and on a provider
// without a replay path (its deliveries are always verified).
func replayed(c *gin.Context, src *Source) bool {
	if !honoursReplay(src) {
		return false
	}
	got := c.GetHeader(intake.ReplayTokenHeader)
	return got != "" && intake.TokenEqual(got, src.ReplayToken)
}
