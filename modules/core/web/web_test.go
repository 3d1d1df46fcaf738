package web_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hookledger/hookledger/modules/core/web"
)

// TestLoggerTraceID checks that every line of a traced request carries its
// trace id, and an untraced request's lines none.
func TestLoggerTraceID(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.ReleaseMode)
	core, logs := observer.New(zapcore.DebugLevel)
	tracer := sdktrace.NewTracerProvider().Tracer("test")
	var traceID string
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if c.Request.URL.Path != "/traced" {
			return
		}
		ctx, span := tracer.Start(c.Request.Context(), "request")
		defer span.End()
		traceID = span.SpanContext().TraceID().String()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}, web.Middleware(zap.New(core)))
	handler := func(c *gin.Context) {
		web.Logger(c).Info("handling")
		c.Status(http.StatusNoContent)
	}
	e.GET("/traced", handler)
	e.GET("/plain", handler)

	for _, path := range []string{"/traced", "/plain"} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	lines := logs.All()
	require.Len(t, lines, 4, "a handler line and an access line per request")
	require.True(t, trace.TraceID{}.String() != traceID)
	for i, l := range lines {
		got, has := l.ContextMap()["trace_id"]
		if i < 2 {
			require.Equal(t, traceID, got, "line %q of the traced request", l.Message)
		} else {
			require.False(t, has, "line %q of the untraced request", l.Message)
		}
	}
}
