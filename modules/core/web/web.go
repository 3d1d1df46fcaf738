// Package web holds the HTTP plumbing every route shares: request ids, the
// request-scoped logger and access logging.
package web

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

const loggerKey = "hookledger.logger"

// RequestIDHeader carries the request id in and out.
const RequestIDHeader = "X-Request-Id"

// Middleware gives each request an id (the caller's X-Request-Id when it is
// short and printable), a logger carrying it and, when the request is
// traced, its trace id, and one access log line.
func Middleware(base *zap.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		id := c.GetHeader(RequestIDHeader)
		if !validID(id) {
			id = newID()
		}
		c.Header(RequestIDHeader, id)
		log := base.WithLazy(zap.String("request_id", id))
		if sc := trace.SpanContextFromContext(c.Request.Context()); sc.IsValid() {
			log = log.WithLazy(zap.String("trace_id", sc.TraceID().String()))
		}
		c.Set(loggerKey, log)
		c.Next()
		status := c.Writer.Status()
		fields := []zap.Field{
			zap.String("method", c.Request.Method),
			zap.String("path", c.Request.URL.Path),
			zap.Int("status", status),
			zap.Duration("duration", time.Since(start)),
		}
		if status >= 500 {
			log.Warn("request", fields...)
		} else {
			log.Debug("request", fields...)
		}
	}
}

// Logger returns the request's logger.
func Logger(c *gin.Context) *zap.Logger {
	if l, ok := c.Get(loggerKey); ok {
		return l.(*zap.Logger)
	}
	return zap.NewNop()
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if r < '!' || r > '~' {
			return false
		}
	}
	return true
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
