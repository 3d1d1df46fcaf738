package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestDeliveryTrace checks that one delivery is one connected trace: the
// HTTP request, the claim inside it, the apply job's insert and its work,
// the apply, and SQL statements under the claim and the apply.
func TestDeliveryTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s := startOn(t, dbtest.New(t), nil, config.RoleAll, app.WithTracerProvider(tp))

	body := subEvent("evt_trace_1", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_trace_1")

	byName := func() map[string]tracetest.SpanStub {
		out := map[string]tracetest.SpanStub{}
		for _, sp := range exp.GetSpans() {
			if _, seen := out[sp.Name]; !seen {
				out[sp.Name] = sp
			}
		}
		return out
	}
	dbtest.Eventually(t, func() bool { _, ok := byName()["ledger.apply"]; return ok }, "the apply span ends")
	spans := byName()
	httpSpan := spans["POST /webhooks/:source"]
	require.True(t, httpSpan.SpanContext.IsValid(), "an HTTP server span")
	require.False(t, httpSpan.Parent.IsValid(), "the HTTP span is the root")
	require.Equal(t, trace.SpanKindServer, httpSpan.SpanKind)

	// Each step is a child of the one before it.
	chain := []string{"POST /webhooks/:source", "ledger.claim", "river.insert_many", "river.work/apply_event", "ledger.apply"}
	for i := 1; i < len(chain); i++ {
		child, parent := spans[chain[i]], spans[chain[i-1]]
		require.True(t, child.SpanContext.IsValid(), "span %s", chain[i])
		require.Equal(t, httpSpan.SpanContext.TraceID(), child.SpanContext.TraceID(), "%s is in the delivery's trace", chain[i])
		require.Equal(t, parent.SpanContext.SpanID(), child.Parent.SpanID(), "%s is a child of %s", chain[i], chain[i-1])
	}
	// SQL statements hang under the claim and under the apply.
	under := map[string]int{}
	for _, sp := range exp.GetSpans() {
		if strings.HasPrefix(sp.Name, "db ") && sp.SpanContext.TraceID() == httpSpan.SpanContext.TraceID() {
			for _, step := range []string{"ledger.claim", "ledger.apply"} {
				if sp.Parent.SpanID() == spans[step].SpanContext.SpanID() {
					under[step]++
				}
			}
		}
	}
	require.Positive(t, under["ledger.claim"], "the claim's SQL is traced")
	require.Positive(t, under["ledger.apply"], "the apply's SQL is traced")
}

// TestClientTraceparentStartsNoTrace: a traceparent (and tracestate) an
// internet client sends sets neither the trace id nor the sampling of
// hookledger's spans: the request's span is a new root, linked to the
// client's context with its tracestate dropped, and no job carries it.
func TestClientTraceparentStartsNoTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s := startOn(t, dbtest.New(t), nil, config.RoleAll, app.WithTracerProvider(tp))
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := subEvent("evt_trace_client", "active", time.Now().Unix())
	h := signed(body, time.Now())
	h.Set("Traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-00") // not sampled, says the client
	h.Set("Tracestate", "attacker=payload")
	code, _ := s.post(t, "/webhooks/stripe", body, h)
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_trace_client")

	var httpSpan *tracetest.SpanStub
	dbtest.Eventually(t, func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.Name == "POST /webhooks/:source" {
				httpSpan = &sp
				return true
			}
		}
		return false
	}, "the request is traced, whatever the client's sampling flag")
	require.False(t, httpSpan.Parent.IsValid(), "a new root")
	require.NotEqual(t, clientTrace, httpSpan.SpanContext.TraceID().String())
	require.Len(t, httpSpan.Links, 1)
	require.Equal(t, clientTrace, httpSpan.Links[0].SpanContext.TraceID().String(), "the client's context, as a link")
	require.Empty(t, httpSpan.Links[0].SpanContext.TraceState().String(), "without its tracestate")
	for _, sp := range exp.GetSpans() {
		require.NotEqual(t, clientTrace, sp.SpanContext.TraceID().String(), "%s is not in the client's trace", sp.Name)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM river_job WHERE metadata::text LIKE '%attacker%' OR metadata::text LIKE '%`+clientTrace+`%'`))
}

// TestBuildInfo checks hookledger_build_info on /metrics.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^hookledger_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`, string(b))
}
