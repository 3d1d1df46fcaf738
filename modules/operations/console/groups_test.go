package console

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFailedPageShowsGroupsFirst: the Failed page lists the groups before
// the events, each with its count, handler, normalised error, sample
// event and a link to its actions; the group page carries both actions
// with the count, the CSRF token and the confirmation.
func TestFailedPageShowsGroupsFirst(t *testing.T) {
	t.Parallel()
	h := &handler{pages: parsePages(), cfg: Config{CSRFToken: "tok", CSRFField: "csrf_token"}}
	exec := func(name string, data any) string {
		var buf bytes.Buffer
		require.NoError(t, h.pages[name].Execute(&buf, page{Title: name, Nav: name, CSRF: "tok", Field: "csrf_token", Data: data}), name)
		return buf.String()
	}
	at := time.Unix(1_800_000_000, 0)
	g := FailureGroup{ID: "3f9a1c2b4d5e6f70", Count: 20, Source: "stripe", Handler: "invoice.applyStripe",
		Error: `customer <id> has no account "…"`, SampleError: `customer cus_1 has no account "acct_1"`,
		FirstFailedAt: at, LastFailedAt: at.Add(time.Minute), SampleEventID: "evt_1", SampleNamespace: "stripe"}

	out := exec("failed", failedData{Groups: groupsView{On: true, Groups: []FailureGroup{g}}, Events: rows(row("evt_1", "failed")), Total: 20})
	groups, events := bytes.Index([]byte(out), []byte(`id="groups"`)), bytes.Index([]byte(out), []byte(`id="each"`))
	require.True(t, groups > 0 && groups < events, "the groups come first")
	require.Contains(t, out, `<tr class="group" id="group-3f9a1c2b4d5e6f70">`)
	require.Contains(t, out, `<td class="count">20</td>`)
	require.Contains(t, out, `<code>invoice.applyStripe</code>`)
	require.Contains(t, out, `customer &lt;id&gt; has no account &#34;…&#34;`)
	require.Contains(t, out, `e.g. customer cus_1 has no account &#34;acct_1&#34;`)
	require.Contains(t, out, `<code class="sample"`)
	require.Contains(t, out, `href="/console/failed/group?id=3f9a1c2b4d5e6f70"`)
	require.Contains(t, out, "none: failed for good or River gave up")

	out = exec("failed", failedData{Groups: groupsView{On: true}})
	require.Contains(t, out, "No failed events.")

	out = exec("group", groupData{Group: g})
	require.Contains(t, out, `<td id="group-count">20</td>`)
	require.Contains(t, out, `href="/console/event?id=evt_1&amp;namespace=stripe"`, "the sample event's page")
	for _, action := range []string{"requeue", "discard"} {
		require.Contains(t, out, `action="/console/failed/group/`+action+`"`)
	}
	require.Contains(t, out, `<input type="hidden" name="csrf_token" value="tok">`)
	require.Contains(t, out, `<input type="hidden" name="confirm" value="yes">`)
	require.Contains(t, out, `Requeue 20 events`)
	require.Contains(t, out, `Discard 20 events`)

	out = exec("groupdone", groupDone{Group: g, Action: "discard", Counts: map[string]int{"discarded": 1, "skipped": 1},
		Events: []GroupOutcome{{Namespace: "stripe", EventID: "evt_1", Result: "discarded"}, {Namespace: "stripe", EventID: "evt_2", Result: "skipped", Reason: "event is settled"}}})
	require.Contains(t, out, `<strong class="count-discarded">1 discarded</strong>`)
	require.Contains(t, out, `<td>skipped</td><td>event is settled</td>`)
}
