package console

import (
	"bytes"
	"fmt"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// TestPagesCallOnlyDefinedTemplates: every page parses with the shared
// templates, and a page calling a template nobody defines is caught when
// the pages are parsed, not when the page is shown.
func TestPagesCallOnlyDefinedTemplates(t *testing.T) {
	t.Parallel()
	pages := parsePages()
	require.Len(t, pages, len(pageNames))
	for name, p := range pages {
		require.Empty(t, undefinedCalls(p), name)
	}
	for _, name := range []string{"events", "failed"} {
		require.NotNil(t, pages[name].Lookup("rows"), "%s has the shared event table", name)
	}

	broken := template.Must(template.New("layout.html").Parse(
		`{{define "content"}}{{if .}}{{range .}}{{template "rows" .}}{{end}}{{else}}{{template "nowhere"}}{{end}}{{end}}{{template "content" .}}`))
	require.Equal(t, []string{"nowhere", "rows"}, undefinedCalls(broken))
}

func row(id string, status webhookevent.Status) *ent.WebhookEvent {
	msg := "subscription.applyStripe: ERROR: new row violates check constraint"
	r := &ent.WebhookEvent{Namespace: "stripe", EventID: id, Source: "stripe", Provider: "stripe",
		EventType: "customer.subscription.updated", Status: status, Attempts: 1, ReceivedAt: time.Unix(1_800_000_000, 0)}
	if status == webhookevent.StatusFailed {
		r.LastError = &msg
	}
	return r
}

// TestListPagesRender: the events and failed pages render the shared
// table with no row, one row and a full page with a next link, each row
// linking to its event whatever its id holds.
func TestListPagesRender(t *testing.T) {
	t.Parallel()
	h := &handler{pages: parsePages(), cfg: Config{CSRFToken: "tok", CSRFField: "csrf_token"}}
	exec := func(name string, data any) string {
		var buf bytes.Buffer
		require.NoError(t, h.pages[name].Execute(&buf, page{Title: name, Nav: name, Data: data}), name)
		return buf.String()
	}

	out := exec("failed", failedData{})
	require.Contains(t, out, `<small id="failed-total">0</small>`)
	require.Contains(t, out, "No events.")
	require.NotContains(t, out, `id="bulk"`, "nothing to requeue")

	out = exec("failed", failedData{Events: []*ent.WebhookEvent{row("evt_a&b/c?d#e", webhookevent.StatusFailed)}, Total: 1})
	require.Contains(t, out, `<small id="failed-total">1</small>`)
	require.Contains(t, out, `href="/console/event?namespace=stripe&amp;id=evt_a%26b%2fc%3fd%23e"`)
	require.Contains(t, out, ">evt_a&amp;b/c?d#e</a>")
	require.Contains(t, out, "violates check constraint")
	require.Contains(t, out, `href="/console/failed/confirm"`)
	require.NotContains(t, out, "No events.")

	var many []*ent.WebhookEvent
	for i := range pageSize {
		many = append(many, row(fmt.Sprintf("evt_many_%02d", i), webhookevent.StatusFailed))
	}
	out = exec("failed", failedData{Events: many, Total: pageSize + 7, Next: "/console/failed?after=42"})
	require.Equal(t, pageSize, strings.Count(out, `<tr class="status-failed">`))
	require.Contains(t, out, `<a id="next" href="/console/failed?after=42">`)
	require.Contains(t, out, "Requeue all 57 failed events")

	out = exec("events", eventsData{Events: []*ent.WebhookEvent{row("evt_ok", webhookevent.StatusSettled)}, Next: "/console/events?after=7"})
	require.Contains(t, out, `<tr class="status-settled">`)
	require.Contains(t, out, `href="/console/event?namespace=stripe&amp;id=evt_ok"`)
	require.Contains(t, out, `<a id="next" href="/console/events?after=7">`)

	require.Contains(t, exec("confirm", 3), `<strong id="confirm-count">3</strong>`)
	require.Contains(t, exec("done", ledger.RequeueCounts{Requeued: 3}), "<strong>3</strong> requeued")
}
