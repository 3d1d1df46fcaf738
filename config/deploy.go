package config

import (
	"strings"
)

// DatabasePooler says what sits between hookledger and PostgreSQL.
type DatabasePooler string

// Poolers.
const (
	// PoolerNone: DATABASE_URL reaches PostgreSQL itself, or a pooler in
	// session mode, where a client keeps its server connection.
	PoolerNone DatabasePooler = "none"
	// PoolerTransaction: DATABASE_URL is a pooler in transaction mode
	// (PgBouncer's pool_mode=transaction and the poolers of managed
	// PostgreSQL offerings), where consecutive transactions of one client
	// may run on different server connections: no named prepared
	// statements, no LISTEN, no session-level advisory locks.
	PoolerTransaction DatabasePooler = "transaction"
)

// checkDeploy warns about a transaction pooler without a direct URL and
// turns tracing on when the standard OTEL_* variables ask for it.
func (c *Config) checkDeploy(l *loader) {
	if c.DatabasePooler == PoolerTransaction && c.DatabaseDirectURL == "" {
		c.Warnings = append(c.Warnings, "DATABASE_POOLER=transaction without DATABASE_DIRECT_URL: workers poll for new jobs instead of listening, "+
			"and `hookledger migrate` needs DATABASE_DIRECT_URL (its lock is held by a session)")
	}
	if c.Tracing = tracingOn(l.value); c.Tracing {
		c.TracingProtocol = or(l.value("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), l.value("OTEL_EXPORTER_OTLP_PROTOCOL"))
		switch c.TracingProtocol {
		case "grpc", "http/protobuf":
		default:
			l.fail("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", c.TracingProtocol)
		}
	}
}

// tracingOn reports whether the standard OpenTelemetry variables ask for
// traces: an OTLP endpoint is set, and neither OTEL_SDK_DISABLED nor
// OTEL_TRACES_EXPORTER turns them off. The exporter reads the rest of the
// OTEL_* variables (protocol, headers, service name, sampler) itself.
func tracingOn(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if exp := strings.ToLower(getenv("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" {
		return false // "none", or an exporter hookledger does not ship
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// MigrationURL is the URL schema migrations run on: DATABASE_DIRECT_URL
// when set, since golang-migrate holds a session-level advisory lock that
// a transaction pooler would hand to another client; else DATABASE_URL.
func (c *Config) MigrationURL() string {
	if c.DatabaseDirectURL != "" {
		return c.DatabaseDirectURL.Reveal()
	}
	return c.DatabaseURL.Reveal()
}
