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

// loadDeploy reads the settings for running behind a pooler, against a
// replicated PostgreSQL and with OpenTelemetry.
func (c *Config) loadDeploy(getenv func(string) string, secret func(string) Secret, fail func(string, ...any)) {
	c.DatabasePooler = DatabasePooler(or(getenv("DATABASE_POOLER"), string(PoolerNone)))
	switch c.DatabasePooler {
	case PoolerNone, PoolerTransaction:
	default:
		fail("DATABASE_POOLER=%q: want none or transaction", c.DatabasePooler)
	}
	c.DatabaseDirectURL = secret("DATABASE_DIRECT_URL")
	if c.DatabasePooler == PoolerTransaction && c.DatabaseDirectURL == "" {
		c.Warnings = append(c.Warnings, "DATABASE_POOLER=transaction without DATABASE_DIRECT_URL: workers poll for new jobs instead of listening, "+
			"and `hookledger migrate` needs DATABASE_DIRECT_URL (its lock is held by a session)")
	}
	if c.Tracing = tracingOn(getenv); c.Tracing {
		c.TracingProtocol = or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), or(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"))
		switch c.TracingProtocol {
		case "grpc", "http/protobuf":
		default:
			fail("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", c.TracingProtocol)
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
