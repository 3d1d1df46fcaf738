package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/web"
)

// Ledger is what the admin API reads, requeues and discards through: the methods of
// *ledger.Store it uses.
type Ledger interface {
	List(ctx context.Context, f ledger.Filter) ([]*ent.WebhookEvent, int64, error)
	Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error)
	Locate(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error)
	FindJob(ctx context.Context, namespace, eventID string) (*ledger.Job, error)
	Requeue(ctx context.Context, namespace, eventID string, force bool) (ledger.RequeueResult, error)
	DiscardMany(ctx context.Context, keys []ledger.EventKey, reason string) ([]*ent.WebhookEvent, error)
	RequeueMatching(ctx context.Context, f ledger.Filter, force, dryRun bool) (ledger.RequeueCounts, error)
	CountByStatus(ctx context.Context) (map[string]int64, bool, error)
	Backlog(ctx context.Context) (ledger.Backlog, error)
	DeliveryCounts(ctx context.Context, since time.Time) ([]ledger.DeliveryCount, error)
}

// Config holds the module's dependencies.
type Config struct {
	Token   string
	Ledger  Ledger
	Metrics *metrics.Set
	// Sources are the configured source names, listed in stats even before
	// their first duplicate.
	Sources []string
	// Stats is this process's delivery counts, flushed before stats are
	// read; nil in a process that takes no webhooks.
	Stats *ledger.DeliveryStats
	// RiverUI is River's UI handler, served under /riverui/.
	RiverUI http.Handler
	// Throttle counts failed authentications per client; share one with
	// every surface behind the same token. Nil: one of the module's own.
	Throttle *Throttle
}

// Routes lists every route the module serves, all behind the token and
// none of them to be framed by another site (refusals included).
func Routes(r gin.IRouter, cfg Config) {
	h := &handler{cfg: cfg}
	auth := Auth(cfg.Token, cfg.Metrics, cfg.Throttle)
	g := r.Group("/admin", web.NoFraming, auth)
	g.GET("/events", h.list)
	g.GET("/events/:event_id", h.show)
	g.POST("/events/:event_id/requeue", h.requeueOne)
	g.POST("/events/:event_id/discard", h.discard)
	g.POST("/events/requeue", h.requeueMany)
	g.GET("/stats", h.stats)
	g.GET("/csrf", csrfToken(cfg.Token))
	if cfg.RiverUI != nil {
		r.GET("/riverui", web.NoFraming, auth, func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/riverui/") })
		r.Any("/riverui/*path", web.NoFraming, auth, gin.WrapH(cfg.RiverUI))
	}
}

type handler struct{ cfg Config }

// EventJSON is the JSON shape of a ledger row.
type EventJSON struct {
	EventID    string     `json:"event_id"`
	Namespace  string     `json:"namespace"`
	Source     string     `json:"source"`
	EventType  string     `json:"event_type"`
	Status     string     `json:"status"`
	Attempts   int        `json:"attempts"`
	LastError  *string    `json:"last_error"`
	ReceivedAt time.Time  `json:"received_at"`
	SettledAt  *time.Time `json:"settled_at"`
	Replayed   bool       `json:"replayed"`
	// Handlers are the modules whose handlers applied the event at its
	// last apply: [] when none matched its type, null before its first
	// apply.
	Handlers []string `json:"handlers"`
	// DiscardReason is why an operator discarded the event; only on
	// discarded rows.
	DiscardReason *string `json:"discard_reason,omitempty"`
	// Failures are the row's last handler failures, oldest first, kept
	// after it recovers: [] when none; only in an event's detail.
	Failures []FailureJSON   `json:"failures,omitzero"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// FailureJSON is one failed apply attempt of an event.
type FailureJSON struct {
	// Attempt is the row's apply attempt that failed.
	Attempt int `json:"attempt"`
	// JobID is the River job whose run failed; null when unknown.
	JobID *int64    `json:"job_id"`
	At    time.Time `json:"at"`
	// Handler is the module and handler that failed ("subscription.applyStripe");
	// null when the failure was not a handler's.
	Handler *string `json:"handler"`
	Error   string  `json:"error"`
}

// EventOf converts a ledger row; detail adds its payload and its failure
// history.
func EventOf(r *ent.WebhookEvent, detail bool) EventJSON {
	e := EventJSON{
		EventID: r.EventID, Namespace: r.Namespace, Source: r.Source, EventType: r.EventType,
		Status: string(r.Status), Attempts: r.Attempts, LastError: r.LastError,
		ReceivedAt: r.ReceivedAt.UTC(), Replayed: r.Replayed, Handlers: r.Handlers,
	}
	if r.SettledAt != nil {
		t := r.SettledAt.UTC()
		e.SettledAt = &t
	}
	if r.Status == webhookevent.StatusDiscarded {
		e.DiscardReason = r.DiscardReason
	}
	if detail {
		e.Payload = json.RawMessage(r.Payload)
		e.Failures = make([]FailureJSON, len(r.FailureLog))
		for i, f := range r.FailureLog {
			out := FailureJSON{Attempt: f.Attempt, At: f.At.UTC(), Error: f.Error}
			if f.JobID != 0 {
				out.JobID = &f.JobID
			}
			if f.Handler != "" {
				out.Handler = &f.Handler
			}
			e.Failures[i] = out
		}
	}
	return e
}

func badRequest(c *gin.Context, msg string) {
	c.JSON(http.StatusBadRequest, gin.H{"error": msg})
}

// filter reads the list filters shared by list and requeue.
func filter(c *gin.Context) (ledger.Filter, bool) {
	f := ledger.Filter{Namespace: c.Query("namespace"), Status: webhookevent.Status(c.Query("status")), Source: c.Query("source"), Type: c.Query("type")}
	if f.Status != "" && !ledger.ValidStatus(f.Status) {
		badRequest(c, "status: want claimed, processing, settled, failed or discarded")
		return f, false
	}
	var err error
	now := time.Now()
	if f.Since, err = config.ParseTime(c.Query("since"), now); err != nil {
		badRequest(c, "since: "+err.Error())
		return f, false
	}
	if f.Until, err = config.ParseTime(c.Query("until"), now); err != nil {
		badRequest(c, "until: "+err.Error())
		return f, false
	}
	return f, true
}

func (h *handler) list(c *gin.Context) {
	f, ok := filter(c)
	if !ok {
		return
	}
	f.Limit = 50
	var err error
	if v := c.Query("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > 500 {
			badRequest(c, "limit: want 1 to 500")
			return
		}
	}
	if v := c.Query("after"); v != "" {
		if f.After, err = strconv.ParseInt(v, 10, 64); err != nil || f.After <= 0 {
			badRequest(c, "after: pass back the next value of the previous page")
			return
		}
	}
	rows, next, err := h.cfg.Ledger.List(c.Request.Context(), f)
	if err != nil {
		h.fail(c, err)
		return
	}
	events := make([]EventJSON, len(rows))
	for i, r := range rows {
		events[i] = EventOf(r, false)
	}
	cursor := ""
	if next > 0 {
		cursor = strconv.FormatInt(next, 10)
	}
	c.JSON(http.StatusOK, gin.H{"events": events, "next": cursor})
}

func (h *handler) show(c *gin.Context) {
	h.onEvent(c, h.cfg.Ledger.Find, func(ctx context.Context, row *ent.WebhookEvent) (any, error) {
		job, err := h.cfg.Ledger.FindJob(ctx, row.Namespace, row.EventID)
		if err != nil {
			return nil, err
		}
		return gin.H{"event": EventOf(row, true), "job": job}, nil
	})
}

// onEvent resolves the event a request names with find (its id, with
// ?namespace= when the id exists in several namespaces), runs act on its
// row and answers 200 with what act returns, or with the status its error
// maps to (answerError). Every action on one event goes through it; one
// that changes no payload finds the row with Locate, which opens none, so
// that it works without the PAYLOAD_KEYS a sealed payload needs.
func (h *handler) onEvent(c *gin.Context, find func(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error),
	act func(ctx context.Context, row *ent.WebhookEvent) (any, error)) {
	ctx := c.Request.Context()
	row, err := find(ctx, c.Query("namespace"), c.Param("event_id"))
	var out any
	if err == nil {
		out, err = act(ctx, row)
	}
	if err != nil {
		h.answerError(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// answerError answers a failed action on one event: 404 unknown, 409 when
// the event's state refuses the action (ambiguous id, being applied right
// now, any refusal of the lifecycle table: settled, erased ...), 400 for a
// missing discard reason, else 500.
func (h *handler) answerError(c *gin.Context, err error) {
	var refused *ledger.TransitionError
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		c.JSON(http.StatusNotFound, gin.H{"error": "event not found"})
	case errors.Is(err, ledger.ErrBeingApplied):
		c.JSON(http.StatusConflict, gin.H{"error": err.Error() + "; try again when it ends"})
	case errors.As(err, &refused), errors.Is(err, ledger.ErrAmbiguous), errors.Is(err, ledger.ErrSettled), errors.Is(err, ledger.ErrNotDiscardable), errors.Is(err, ledger.ErrErased):
		c.JSON(http.StatusConflict, gin.H{"error": err.Error()})
	case errors.Is(err, ledger.ErrNoReason):
		badRequest(c, `reason: `+err.Error()+`, as {"reason":"..."}`)
	default:
		h.fail(c, err)
	}
}

func (h *handler) requeueOne(c *gin.Context) {
	force := c.Query("force") == "true"
	h.onEvent(c, h.cfg.Ledger.Locate, func(ctx context.Context, row *ent.WebhookEvent) (any, error) {
		res, err := h.cfg.Ledger.Requeue(ctx, row.Namespace, row.EventID, force)
		if err != nil {
			return nil, err
		}
		n := 1
		if res == ledger.RequeuePending {
			n = 0
		}
		return gin.H{"requeued": n, "result": res}, nil
	})
}

// maxDiscardBody bounds a discard's request body.
const maxDiscardBody = 16 << 10

// discard puts an event away with the reason in its body,
// {"reason":"..."} (or a form's reason field), and answers with the
// discarded row, as GET /admin/events/:event_id's "event": with its
// payload when this process's PAYLOAD_KEYS opens it, else without.
func (h *handler) discard(c *gin.Context) {
	reason, ok := discardReason(c)
	if !ok {
		return
	}
	h.onEvent(c, h.cfg.Ledger.Locate, func(ctx context.Context, row *ent.WebhookEvent) (any, error) {
		rows, err := h.cfg.Ledger.DiscardMany(ctx, []ledger.EventKey{{Namespace: row.Namespace, EventID: row.EventID}}, reason)
		if err != nil {
			return nil, err
		}
		if full, err := h.cfg.Ledger.Find(ctx, row.Namespace, row.EventID); err == nil {
			return EventOf(full, true), nil
		}
		return EventOf(rows[0], true), nil
	})
}

// discardReason reads a discard's reason; without one it answers 400 (413
// for a body over maxDiscardBody).
func discardReason(c *gin.Context) (string, bool) {
	var body struct {
		Reason string `json:"reason"`
	}
	if strings.HasPrefix(c.GetHeader("Content-Type"), "application/x-www-form-urlencoded") {
		// A form: the CSRF check may have parsed it already.
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxDiscardBody)
		body.Reason = c.Request.PostFormValue("reason")
	} else {
		raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxDiscardBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			c.JSON(http.StatusRequestEntityTooLarge, gin.H{"error": fmt.Sprintf("body over %d bytes", maxDiscardBody)})
			return "", false
		case err != nil:
			badRequest(c, "read body: "+err.Error())
			return "", false
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			badRequest(c, `body: want {"reason":"..."}: `+err.Error())
			return "", false
		}
	}
	if strings.TrimSpace(body.Reason) == "" {
		badRequest(c, `reason: `+ledger.ErrNoReason.Error()+`, as {"reason":"..."}`)
		return "", false
	}
	return body.Reason, true
}

func (h *handler) requeueMany(c *gin.Context) {
	f, ok := filter(c)
	if !ok {
		return
	}
	force := c.Query("force") == "true"
	if f.Status == "" {
		f.Status = webhookevent.StatusFailed
	}
	if !Requeueable(f.Status, force) {
		badRequest(c, "status: failed or discarded, or settled with force=true")
		return
	}
	counts, err := h.cfg.Ledger.RequeueMatching(c.Request.Context(), f, force, c.Query("dry_run") == "true")
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, counts)
}

// Requeueable reports whether a bulk requeue takes events of status:
// failed and discarded ones, settled ones only with force.
func Requeueable(status webhookevent.Status, force bool) bool {
	switch status {
	case webhookevent.StatusFailed, webhookevent.StatusDiscarded:
		return true
	case webhookevent.StatusSettled:
		return force
	}
	return false
}

// Rate is a source's duplicates over the last hour and day, as every
// receiver process recorded them in delivery_stat.
type Rate struct {
	LastHour int64 `json:"last_hour"`
	LastDay  int64 `json:"last_day"`
}

// Duplicates reads every source's duplicates over the last hour and day
// from delivery_stat, after adding this process's unflushed counts; the
// configured sources are listed even before their first duplicate.
func Duplicates(ctx context.Context, l Ledger, stats *ledger.DeliveryStats, sources []string) (map[string]Rate, error) {
	if err := stats.Flush(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	out := map[string]Rate{}
	for _, s := range sources {
		out[s] = Rate{}
	}
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour} {
		counts, err := l.DeliveryCounts(ctx, now.Add(-window))
		if err != nil {
			return nil, err
		}
		for _, c := range counts {
			if c.Outcome != metrics.OutcomeDuplicate {
				continue
			}
			r := out[c.Source]
			if window == time.Hour {
				r.LastHour = c.Count
			} else {
				r.LastDay = c.Count
			}
			out[c.Source] = r
		}
	}
	return out, nil
}

func (h *handler) stats(c *gin.Context) {
	ctx := c.Request.Context()
	byStatus, _, err := h.cfg.Ledger.CountByStatus(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	backlog, err := h.cfg.Ledger.Backlog(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	dups, err := Duplicates(ctx, h.cfg.Ledger, h.cfg.Stats, h.cfg.Sources)
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{
		"by_status":              byStatus,
		"duplicates":             dups,
		"oldest_pending_seconds": int64(backlog.Oldest.Seconds()),
	})
}

func (h *handler) fail(c *gin.Context, err error) {
	web.Logger(c).Error("admin request failed", zap.Error(err))
	c.JSON(http.StatusInternalServerError, gin.H{"error": "internal error"})
}
