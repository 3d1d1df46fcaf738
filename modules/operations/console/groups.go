package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// FailureGroup is the failed events of one cause, as the Failed page
// shows them: grouped by source, the module.handler that failed and the
// error with its variable parts normalised.
type FailureGroup struct {
	ID              string
	Count           int
	Source          string
	Handler         string
	Error           string
	SampleError     string
	FirstFailedAt   time.Time
	LastFailedAt    time.Time
	SampleEventID   string
	SampleNamespace string
	// NextRetryAt is River's soonest automatic retry among the group's
	// newest failures; nil when none waits.
	NextRetryAt *time.Time
}

// GroupOutcome is what a group action did to one of its events.
type GroupOutcome struct {
	Namespace, EventID string
	// Result is requeued, pending, discarded or skipped (Reason says why).
	Result, Reason string
}

// Failures reads the failure groups and acts on a whole group, one event
// at a time through the ledger's requeue and discard.
type Failures interface {
	// Groups returns the groups, the largest first; truncated when the
	// ledger holds more failed events than one read takes.
	Groups(ctx context.Context) (groups []FailureGroup, truncated bool, err error)
	// Group returns a group and its events; ErrUnknownGroup when no
	// failed event is in it.
	Group(ctx context.Context, id string) (FailureGroup, []ledger.EventKey, error)
	Requeue(ctx context.Context, id string, keys []ledger.EventKey) ([]GroupOutcome, error)
	Discard(ctx context.Context, id string, keys []ledger.EventKey, reason string) ([]GroupOutcome, error)
}

// ErrUnknownGroup is what Failures.Group answers for a group without a
// failed event.
var ErrUnknownGroup = errors.New("no failed event is in this group")

// EventLink is the console page of a group's sample event.
func (g FailureGroup) EventLink() string { return eventURL(g.SampleNamespace, g.SampleEventID) }

// groupData is what the group page shows: the group, and the form of
// each action with the count it will touch.
type groupData struct {
	Group FailureGroup
	// Error is why the action just posted was refused.
	Error string
}

// groupDone is the outcome of a group action.
type groupDone struct {
	Group  FailureGroup
	Action string
	Counts map[string]int
	Events []GroupOutcome
}

// failureGroup shows one group with its actions, each saying how many
// events it will touch.
func (h *handler) failureGroup(c *gin.Context) {
	g, _, ok := h.findGroup(c)
	if ok {
		h.render(c, "group", "Failure group", groupData{Group: g})
	}
}

func (h *handler) findGroup(c *gin.Context) (FailureGroup, []ledger.EventKey, bool) {
	id := c.Query("id")
	if c.Request.Method == http.MethodPost {
		id = c.PostForm("id")
	}
	g, keys, err := h.cfg.Failures.Group(c.Request.Context(), id)
	switch {
	case errors.Is(err, ErrUnknownGroup):
		h.message(c, http.StatusNotFound, "no failed event is in this group: its events were requeued, discarded or settled since")
		return g, nil, false
	case err != nil:
		h.fail(c, err)
		return g, nil, false
	}
	return g, keys, true
}

// requeueGroup requeues every event of the group once confirmed.
func (h *handler) requeueGroup(c *gin.Context) {
	h.actOnGroup(c, "requeue", func(ctx context.Context, g FailureGroup, keys []ledger.EventKey) ([]GroupOutcome, error) {
		return h.cfg.Failures.Requeue(ctx, g.ID, keys)
	})
}

// discardGroup discards every event of the group with the form's reason
// once confirmed; without a reason it shows the group again (400).
func (h *handler) discardGroup(c *gin.Context) {
	h.actOnGroup(c, "discard", func(ctx context.Context, g FailureGroup, keys []ledger.EventKey) ([]GroupOutcome, error) {
		return h.cfg.Failures.Discard(ctx, g.ID, keys, c.PostForm("reason"))
	})
}

func (h *handler) actOnGroup(c *gin.Context, action string, act func(context.Context, FailureGroup, []ledger.EventKey) ([]GroupOutcome, error)) {
	if c.PostForm("confirm") != "yes" {
		h.message(c, http.StatusBadRequest, "confirm the action on the group's page")
		return
	}
	g, keys, ok := h.findGroup(c)
	if !ok {
		return
	}
	if action == "discard" && strings.TrimSpace(c.PostForm("reason")) == "" {
		h.renderStatus(c, http.StatusBadRequest, "group", "Failure group",
			groupData{Group: g, Error: "Not discarded: a discard needs a reason. Say why these events will not be applied."})
		return
	}
	events, err := act(c.Request.Context(), g, keys)
	if err != nil {
		h.fail(c, err)
		return
	}
	d := groupDone{Group: g, Action: action, Counts: map[string]int{}, Events: events}
	for _, e := range events {
		d.Counts[e.Result]++
	}
	h.render(c, "groupdone", "Failure group", d)
}

// groupsView is the Failed page's table of groups.
type groupsView struct {
	Groups    []FailureGroup
	Truncated bool
	// On: the console reads groups (Config.Failures is set).
	On bool
}

// failureGroups reads the groups for the Failed page; none when the
// console has no Failures.
func (h *handler) failureGroups(ctx context.Context) (groupsView, error) {
	if h.cfg.Failures == nil {
		return groupsView{}, nil
	}
	gs, truncated, err := h.cfg.Failures.Groups(ctx)
	return groupsView{Groups: gs, Truncated: truncated, On: true}, err
}
