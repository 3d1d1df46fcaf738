package app

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hookledger/hookledger/config"
)

// FeedLogger is the name of the per-event feed loggers ("http.feed"): one
// line per claim and per apply. With console logs (dev) the feed shows at
// info as bare lines, "10:04:05 --> invoice.paid evt_1 claimed"; with JSON
// logs (production) its lines are debug, so LOG_LEVEL=info keeps one
// line per event out of the logs at any rate.
const FeedLogger = "feed"

// NewLogger builds the process's one logger: JSON for production, colored
// console lines for development, on stderr.
func NewLogger(cfg *config.Config) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	var zc zap.Config
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	} else {
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "time"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.DisableStacktrace = level > zapcore.DebugLevel
	log, err := zc.Build()
	if err != nil {
		return nil, err
	}
	var feed zapcore.Core
	if cfg.LogFormat == "console" {
		enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{
			TimeKey: "time", MessageKey: "msg", EncodeTime: zapcore.TimeEncoderOfLayout("15:04:05"), ConsoleSeparator: " ",
		})
		feed = zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zc.Level)
	}
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return feedRouter{main: c, feed: feed} })), nil
}

// feedRouter sends the feed loggers' entries to feed as bare lines, or,
// when feed is nil, to main one level down (debug).
type feedRouter struct {
	main zapcore.Core
	feed zapcore.Core
}

func isFeed(ent zapcore.Entry) bool {
	return ent.LoggerName == FeedLogger || strings.HasSuffix(ent.LoggerName, "."+FeedLogger)
}

func (r feedRouter) Enabled(l zapcore.Level) bool {
	return r.main.Enabled(l) || (r.feed != nil && r.feed.Enabled(l))
}

func (r feedRouter) With(fields []zapcore.Field) zapcore.Core {
	return feedRouter{main: r.main.With(fields), feed: r.feed}
}

func (r feedRouter) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !isFeed(ent) {
		return r.main.Check(ent, ce)
	}
	if r.feed == nil {
		if ent.Level == zapcore.InfoLevel {
			ent.Level = zapcore.DebugLevel
		}
		return r.main.Check(ent, ce)
	}
	if r.feed.Enabled(ent.Level) {
		return ce.AddCore(ent, r)
	}
	return ce
}

// Write is reached only for feed entries on a console: the bare line,
// without the request's fields.
func (r feedRouter) Write(ent zapcore.Entry, _ []zapcore.Field) error { return r.feed.Write(ent, nil) }

func (r feedRouter) Sync() error {
	if r.feed != nil {
		_ = r.feed.Sync()
	}
	return r.main.Sync()
}
