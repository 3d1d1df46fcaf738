package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/receiver"
)

// tracerName names the spans hookledger itself starts.
const tracerName = "github.com/hookledger/hookledger"

// Option changes how New builds a process.
type Option func(*App)

// WithTracerProvider traces the process into tp whatever the OTEL_*
// variables say (tests use an in-memory exporter).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(a *App) { a.tracing = tp }
}

// startTracing builds the OTLP exporter when the OTEL_* variables ask for
// traces. Off, nothing is traced: no middleware, no pgx tracer, no River
// middleware is installed, so tracing costs nothing.
func (a *App) startTracing(ctx context.Context) error {
	if a.tracing != nil || !a.cfg.Tracing {
		return nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	// The exporters read OTEL_EXPORTER_OTLP_* (endpoint, headers, TLS,
	// timeout) themselves.
	if a.cfg.TracingProtocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("OTLP trace exporter: %w", err)
	}
	v := buildVersion()
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults.
	res, err := resource.Merge(resource.NewSchemaless(
		attribute.String("service.name", "hookledger"), attribute.String("service.version", v.Module),
		attribute.String("vcs.revision", v.Revision), attribute.String("hookledger.role", string(a.role)),
	), resource.Environment())
	if err != nil {
		return fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	a.tracing, a.stopTracing = tp, tp.Shutdown
	return nil
}

// riverMiddleware traces jobs: otelriver's insert and work spans, the
// work span made a child of the insert span (otelriver stores the trace
// context in the job's metadata and would only link to it), and an apply
// span per ledger job.
func (a *App) riverMiddleware() []rivertype.Middleware {
	if a.tracing == nil {
		return nil
	}
	return []rivertype.Middleware{
		&jobParent{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: a.tracing, EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true,
		}),
		&applySpan{tracer: a.tracing.Tracer(tracerName)},
	}
}

// jobParent continues the trace that inserted a job.
type jobParent struct{ river.MiddlewareDefaults }

func (*jobParent) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var meta map[string]any
	if json.Unmarshal(job.Metadata, &meta) == nil {
		carrier := propagation.MapCarrier{}
		for _, k := range (propagation.TraceContext{}).Fields() {
			if s, ok := meta[k].(string); ok {
				carrier[k] = s
			}
		}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	return doInner(ctx)
}

// applySpan is the span of a ledger apply: the events a job settles.
type applySpan struct {
	river.MiddlewareDefaults
	tracer trace.Tracer
}

func (m *applySpan) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if job.Kind != (ledger.ApplyArgs{}).Kind() && job.Kind != (ledger.ApplyBatchArgs{}).Kind() {
		return doInner(ctx)
	}
	ctx, span := m.tracer.Start(ctx, "ledger.apply", trace.WithAttributes(
		attribute.String("river.job.kind", job.Kind), attribute.Int64("river.job.id", job.ID),
		attribute.String("hookledger.events", string(job.EncodedArgs))))
	defer span.End()
	err := doInner(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// traceRequests starts a server span per request, continuing a W3C trace
// context the caller sent; the request logger (web.Middleware, after it)
// adds its trace id to every line.
func traceRequests(tp trace.TracerProvider) gin.HandlerFunc {
	tracer := tp.Tracer(tracerName)
	return func(c *gin.Context) {
		// Anyone on the internet may send traceparent: a request starts a
		// trace of its own, so that a client never sets the trace id or the
		// sampling of hookledger's spans (or what its jobs carry), and a
		// valid remote context is kept only as a link. tracestate is dropped.
		opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer)}
		remote := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(c.Request.Header)))
		if remote.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote.WithTraceState(trace.TraceState{})}))
		}
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		opts = append(opts, trace.WithAttributes(attribute.String("http.request.method", c.Request.Method), attribute.String("http.route", route)))
		ctx, span := tracer.Start(c.Request.Context(), c.Request.Method+" "+route, opts...)
		defer span.End()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		status := c.Writer.Status()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, fmt.Sprint(status))
		}
	}
}

// tracedClaimer is the claim's span: the ledger insert and the apply
// job's insert happen inside it.
type tracedClaimer struct {
	receiver.Claimer
	tracer trace.Tracer
}

func (t tracedClaimer) Claim(ctx context.Context, in ledger.Claim) (ledger.ClaimResult, error) {
	ctx, span := t.tracer.Start(ctx, "ledger.claim", trace.WithAttributes(
		attribute.String("hookledger.namespace", in.Namespace), attribute.String("hookledger.event_id", in.EventID)))
	defer span.End()
	res, err := t.Claimer.Claim(ctx, in)
	span.SetAttributes(attribute.Bool("hookledger.claimed", res == ledger.Claimed))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

// pgxTracer gives each SQL statement a client span.
type pgxTracer struct{ tracer trace.Tracer }

type pgxSpanKey struct{}

func (t pgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op, _, _ := strings.Cut(strings.TrimSpace(data.SQL), " ")
	ctx, span := t.tracer.Start(ctx, "db "+strings.ToUpper(op), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", truncate(data.SQL, 1000))))
	return context.WithValue(ctx, pgxSpanKey{}, span)
}

func (t pgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(pgxSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.End()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// buildInfo is hookledger_build_info{version,revision,goversion} 1.
func buildInfo() prometheus.Collector {
	v := buildVersion()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookledger_build_info",
		Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(v.Module, v.Revision, v.GoVersion).Set(1)
	return g
}
