package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

// forceSemantics is what a forced re-apply does, shown beside the button.
const forceSemantics = "Force re-applies a settled event through its handlers once more, in a job of its own. " +
	"Version-guarded state (subscription, payment) is left alone unless the event is newer than what is stored; " +
	"usage replaces this event's earlier delta instead of adding it again. The row stays settled until that apply commits."

type eventsData struct {
	Status string
	Source string
	Type   string
	Since  string
	Until  string
	ID     string
	// Prefix: no event has the id searched for, and Events are those
	// whose id starts with it (at most pageSize).
	Prefix bool
	Events rowsData
	Next   string
	// Scanned: the page found fewer rows than it shows at most, though
	// older ones remain; a filter without an index of its own is matched
	// among ledger.ListScanLimit rows per page.
	Scanned bool
	Sources []string
	Error   string
}

// ScanLimit is how many rows a list page matches its filters among.
func (eventsData) ScanLimit() int { return ledger.ListScanLimit }

func (h *handler) sourceNames() []string {
	names := make([]string, len(h.cfg.Sources))
	for i, s := range h.cfg.Sources {
		names[i] = s.Name
	}
	return names
}

func (h *handler) events(c *gin.Context) {
	ctx := c.Request.Context()
	d := eventsData{
		Status: c.Query("status"), Source: c.Query("source"), Type: c.Query("type"),
		Since: c.Query("since"), Until: c.Query("until"), ID: c.Query("id"), Sources: h.sourceNames(),
	}
	if d.ID != "" {
		rows, _, err := h.cfg.Ledger.List(ctx, ledger.Filter{EventID: d.ID, Limit: 10})
		if err != nil {
			h.fail(c, err)
			return
		}
		if len(rows) == 1 {
			c.Redirect(http.StatusSeeOther, eventPath(rows[0]))
			return
		}
		if len(rows) == 0 {
			// No such id: the ids that start with it.
			d.Prefix = true
			if rows, err = h.cfg.Ledger.Search(ctx, d.ID, pageSize); err != nil {
				h.fail(c, err)
				return
			}
		}
		if d.Events, err = h.listRows(ctx, rows); err != nil {
			h.fail(c, err)
			return
		}
		h.render(c, "events", "Events", d)
		return
	}
	f, err := listFilter(d, c.Query("after"))
	if err != nil {
		c.Status(http.StatusBadRequest)
		d.Error = err.Error()
		h.render(c, "events", "Events", d)
		return
	}
	rows, next, err := h.cfg.Ledger.List(ctx, f)
	if err != nil {
		h.fail(c, err)
		return
	}
	if d.Events, err = h.listRows(ctx, rows); err != nil {
		h.fail(c, err)
		return
	}
	if next > 0 {
		q := c.Request.URL.Query()
		q.Set("after", strconv.FormatInt(next, 10))
		d.Next = "/console/events?" + q.Encode()
		d.Scanned = len(rows) < f.Limit
	}
	h.render(c, "events", "Events", d)
}

// listFilter reads the list filters as the admin API does.
func listFilter(d eventsData, after string) (ledger.Filter, error) {
	f := ledger.Filter{Status: webhookevent.Status(d.Status), Source: d.Source, Type: d.Type, Limit: pageSize}
	if f.Status != "" && !ledger.ValidStatus(f.Status) {
		return f, errors.New("status: want claimed, processing, settled, failed or discarded")
	}
	var err error
	now := time.Now()
	if f.Since, err = config.ParseTime(d.Since, now); err != nil {
		return f, errors.New("since: " + err.Error())
	}
	if f.Until, err = config.ParseTime(d.Until, now); err != nil {
		return f, errors.New("until: " + err.Error())
	}
	if after != "" {
		if f.After, err = strconv.ParseInt(after, 10, 64); err != nil || f.After <= 0 {
			return f, errors.New("after: follow the next-page link")
		}
	}
	return f, nil
}

// eventURL is the detail page of an event: the key goes in the query, so
// any id (slashes included) makes a valid link.
func eventURL(namespace, id string) string {
	return "/console/event?" + url.Values{"namespace": {namespace}, "id": {id}}.Encode()
}

func eventPath(r *ent.WebhookEvent) string {
	return eventURL(r.Namespace, r.EventID)
}

type header struct{ Name, Value string }

type eventData struct {
	Row     *ent.WebhookEvent
	Path    string
	Payload string
	Headers []header
	Job     *ledger.Job
	// Next is when River applies it next (nextTry).
	Next string
	// Handlers says which modules applied it (handlersText).
	Handlers  string
	Unhandled bool
	// FailedIn is the module and handler of its last failure, Module its
	// module; "" when it never failed in a handler.
	FailedIn, Module string
	// History is its failure log, newest first.
	History []failureView
	// Discardable: not settled and not discarded yet.
	Discardable bool
	// Done is the code of the action just done (a key of flashes, from
	// the redirect's done=); any other value shows no message.
	Done string
	// Error is why the action just posted was refused.
	Error   string
	Force   string
	ClockMS string
}

func (h *handler) event(c *gin.Context) {
	h.showEvent(c, http.StatusOK, c.Query("namespace"), c.Query("id"), c.Query("done"), "")
}

// showEvent renders the page of an event with code, the flash of an
// action done, or the error of an action refused.
func (h *handler) showEvent(c *gin.Context, code int, namespace, id, done, refused string) {
	ctx := c.Request.Context()
	row, err := h.cfg.Ledger.Find(ctx, namespace, id)
	if errors.Is(err, ledger.ErrNotFound) {
		h.message(c, http.StatusNotFound, "event not found")
		return
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	d := eventData{Row: row, Done: done, Error: refused, Force: forceSemantics,
		Handlers: handlersText(row), Unhandled: unhandled(row), History: history(row),
		Discardable: row.Status != webhookevent.StatusSettled && row.Status != webhookevent.StatusDiscarded}
	if len(row.FailureLog) > 0 || row.Status == webhookevent.StatusFailed {
		d.FailedIn = failingHandler(row)
		d.Module = moduleOf(d.FailedIn)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, []byte(row.Payload), "", "  ") == nil {
		d.Payload = pretty.String()
	} else {
		d.Payload = string(row.Payload)
	}
	for k, v := range row.Headers {
		d.Headers = append(d.Headers, header{k, v})
	}
	sort.Slice(d.Headers, func(a, b int) bool { return d.Headers[a].Name < d.Headers[b].Name })
	if row.ClockSkewMs != nil {
		d.ClockMS = strconv.FormatInt(*row.ClockSkewMs, 10) + " ms"
	}
	if d.Job, err = h.cfg.Ledger.FindJob(ctx, row.Namespace, row.EventID); err != nil {
		h.fail(c, err)
		return
	}
	d.Next = nextTry(row, d.Job, time.Now())
	h.renderStatus(c, code, "event", row.EventID, d)
}

// requeue is the detail page's action: Requeue, forced when the form says
// so, exactly as POST /admin/events/{id}/requeue. A discarded event comes
// back: claimed, and applied now.
func (h *handler) requeue(c *gin.Context) {
	ns, id := c.PostForm("namespace"), c.PostForm("id")
	res, err := h.cfg.Ledger.Requeue(c.Request.Context(), ns, id, c.PostForm("force") == "true")
	done := string(res)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		h.message(c, http.StatusNotFound, "event not found")
		return
	case errors.Is(err, ledger.ErrSettled):
		done = string(webhookevent.StatusSettled)
	case errors.Is(err, ledger.ErrErased):
		h.message(c, http.StatusConflict, "this event was erased: nothing is left to apply")
		return
	case errors.As(err, new(*ledger.TransitionError)):
		h.message(c, http.StatusConflict, "not requeued: "+err.Error())
		return
	case err != nil:
		h.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, eventURL(ns, id)+"&done="+done)
}

// discard is the detail page's Discard: DiscardMany of the one event with
// the form's reason, exactly as POST /admin/events/{id}/discard, which
// opens no payload. A refusal shows the event's page again with why: 400
// without a reason, 409 when the event is settled or being applied right
// now.
func (h *handler) discard(c *gin.Context) {
	ns, id := c.PostForm("namespace"), c.PostForm("id")
	_, err := h.cfg.Ledger.DiscardMany(c.Request.Context(), []ledger.EventKey{{Namespace: ns, EventID: id}}, c.PostForm("reason"))
	switch {
	case err == nil:
		c.Redirect(http.StatusSeeOther, eventURL(ns, id)+"&done=discarded")
	case errors.Is(err, ledger.ErrNotFound):
		h.message(c, http.StatusNotFound, "event not found")
	case errors.Is(err, ledger.ErrNoReason):
		h.showEvent(c, http.StatusBadRequest, ns, id, "", "Not discarded: a discard needs a reason. Say why this event will not be applied.")
	case errors.Is(err, ledger.ErrBeingApplied):
		h.showEvent(c, http.StatusConflict, ns, id, "", "Not discarded: a job is applying this event right now. Try again when it ends.")
	case errors.Is(err, ledger.ErrNotDiscardable):
		h.showEvent(c, http.StatusConflict, ns, id, "", "Not discarded: the event is settled, it was applied.")
	case errors.As(err, new(*ledger.TransitionError)):
		h.showEvent(c, http.StatusConflict, ns, id, "", "Not discarded: "+err.Error()+".")
	default:
		h.fail(c, err)
	}
}

type failedData struct {
	// Groups are the failed events grouped by cause, shown first.
	Groups groupsView
	Events rowsData
	Next   string
	Total  int
}

func (h *handler) failedCount(c *gin.Context) (int, error) {
	b, err := h.cfg.Ledger.Backlog(c.Request.Context())
	return int(b.Failed), err
}

func (h *handler) failed(c *gin.Context) {
	f, err := listFilter(eventsData{Status: string(webhookevent.StatusFailed)}, c.Query("after"))
	if err != nil {
		h.message(c, http.StatusBadRequest, err.Error())
		return
	}
	rows, next, err := h.cfg.Ledger.List(c.Request.Context(), f)
	if err != nil {
		h.fail(c, err)
		return
	}
	var d failedData
	if d.Groups, err = h.failureGroups(c.Request.Context()); err != nil {
		h.fail(c, err)
		return
	}
	if d.Events, err = h.listRows(c.Request.Context(), rows); err != nil {
		h.fail(c, err)
		return
	}
	if next > 0 {
		d.Next = "/console/failed?after=" + strconv.FormatInt(next, 10)
	}
	if d.Total, err = h.failedCount(c); err != nil {
		h.fail(c, err)
		return
	}
	h.render(c, "failed", "Failed", d)
}

// confirmFailed is the bulk requeue's confirmation step: the count, and
// the form that does it.
func (h *handler) confirmFailed(c *gin.Context) {
	n, err := h.failedCount(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.render(c, "confirm", "Requeue failed events", n)
}

// requeueFailed requeues every failed event through RequeueMatching, as
// POST /admin/events/requeue?status=failed does, once confirmed.
func (h *handler) requeueFailed(c *gin.Context) {
	if c.PostForm("confirm") != "yes" {
		h.message(c, http.StatusBadRequest, "confirm the bulk requeue on /console/failed/confirm")
		return
	}
	counts, err := h.cfg.Ledger.RequeueMatching(c.Request.Context(), ledger.Filter{Status: webhookevent.StatusFailed}, false, false)
	if err != nil {
		h.fail(c, err)
		return
	}
	h.render(c, "done", "Requeued", counts)
}
