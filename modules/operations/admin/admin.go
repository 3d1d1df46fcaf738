package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
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

// Ledger is what the admin API reads and requeues through: the methods of
// *ledger.Store it uses.
type Ledger interface {
	List(ctx context.Context, f ledger.Filter) ([]*ent.WebhookEvent, int64, error)
	Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error)
	FindJob(ctx context.Context, namespace, eventID string) (*ledger.Job, error)
	Requeue(ctx context.Context, namespace, eventID string, force bool) (ledger.RequeueResult, error)
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
}

// Routes lists every route the module serves, all behind the token.
func Routes(r gin.IRouter, cfg Config) {
	h := &handler{cfg: cfg}
	auth := Auth(cfg.Token, cfg.Metrics)
	g := r.Group("/admin", auth)
	g.GET("/events", h.list)
	g.GET("/events/:event_id", h.show)
	g.POST("/events/:event_id/requeue", h.requeueOne)
	g.POST("/events/requeue", h.requeueMany)
	g.GET("/stats", h.stats)
	g.GET("/csrf", csrfToken(cfg.Token))
	if cfg.RiverUI != nil {
		r.GET("/riverui", auth, func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/riverui/") })
		r.Any("/riverui/*path", auth, gin.WrapH(cfg.RiverUI))
	}
}

type handler struct{ cfg Config }

// EventJSON is the JSON shape of a ledger row.
type EventJSON struct {
	EventID    string          `json:"event_id"`
	Namespace  string          `json:"namespace"`
	Source     string          `json:"source"`
	EventType  string          `json:"event_type"`
	Status     string          `json:"status"`
	Attempts   int             `json:"attempts"`
	LastError  *string         `json:"last_error"`
	ReceivedAt time.Time       `json:"received_at"`
	SettledAt  *time.Time      `json:"settled_at"`
	Replayed   bool            `json:"replayed"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// EventOf converts a ledger row; withPayload adds the payload.
func EventOf(r *ent.WebhookEvent, withPayload bool) EventJSON {
	e := EventJSON{
		EventID: r.EventID, Namespace: r.Namespace, Source: r.Source, EventType: r.EventType,
		Status: string(r.Status), Attempts: r.Attempts, LastError: r.LastError,
		ReceivedAt: r.ReceivedAt.UTC(), Replayed: r.Replayed,
	}
	if r.SettledAt != nil {
		t := r.SettledAt.UTC()
		e.SettledAt = &t
	}
	if withPayload {
		e.Payload = json.RawMessage(r.Payload)
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
		badRequest(c, "status: want claimed, processing, settled or failed")
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
	row, ok := h.find(c)
	if !ok {
		return
	}
	job, err := h.cfg.Ledger.FindJob(c.Request.Context(), row.Namespace, row.EventID)
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"event": EventOf(row, true), "job": job})
}

func (h *handler) find(c *gin.Context) (*ent.WebhookEvent, bool) {
	row, err := h.cfg.Ledger.Find(c.Request.Context(), c.Query("namespace"), c.Param("event_id"))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		c.JSON(http.StatusNotFound, gin.H{"error": "event not found"})
		return nil, false
	case errors.Is(err, ledger.ErrAmbiguous):
		c.JSON(http.StatusConflict, gin.H{"error": err.Error()})
		return nil, false
	case err != nil:
		h.fail(c, err)
		return nil, false
	}
	return row, true
}

func (h *handler) requeueOne(c *gin.Context) {
	row, ok := h.find(c)
	if !ok {
		return
	}
	res, err := h.cfg.Ledger.Requeue(c.Request.Context(), row.Namespace, row.EventID, c.Query("force") == "true")
	switch {
	case errors.Is(err, ledger.ErrSettled):
		c.JSON(http.StatusConflict, gin.H{"error": err.Error()})
	case err != nil:
		h.fail(c, err)
	default:
		n := 1
		if res == ledger.RequeuePending {
			n = 0
		}
		c.JSON(http.StatusOK, gin.H{"requeued": n, "result": res})
	}
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
	if f.Status != webhookevent.StatusFailed && !(f.Status == webhookevent.StatusSettled && force) {
		badRequest(c, "status: failed, or settled with force=true")
		return
	}
	counts, err := h.cfg.Ledger.RequeueMatching(c.Request.Context(), f, force, c.Query("dry_run") == "true")
	if err != nil {
		h.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, counts)
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
