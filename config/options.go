package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:generate go test -run TestConfigReference ../app -update

// An Option is one environment variable hookledger reads: its name, its
// default and what it does. FromEnv reads the options in the order of
// Options, and docs/configuration.md is generated from them.
type Option struct {
	Name string
	// Group is the heading the option is documented under.
	Group string
	// Default is what an unset or empty variable means, written as a value
	// of it. DefaultDoc, when set, says the default where Default cannot:
	// one that follows from other options, or none.
	Default    string
	DefaultDoc string
	// Secret options are also read from the file NAME_FILE names (Docker
	// and Kubernetes secrets), have surrounding white space trimmed, and
	// are never printed.
	Secret bool
	// Provider is the provider whose source the variable enables, with a
	// secret or, when PublicKeys, with the sender's public keys; its URL
	// is POST /webhooks/<Provider>.
	Provider   string
	PublicKeys bool
	// Doc says what the option does, for the generated documentation.
	Doc string

	// set sets the option's field of c from v, the variable's value or
	// Default, and says what is wrong with v. Nil for an option that a
	// check reads along with others (a provider's secrets, OTEL_*).
	set setFunc
}

// setFunc sets the field of option name from v; its error names the
// option and says what is wrong with v.
type setFunc func(c *Config, name, v string) error

// Options lists every option, in the order FromEnv reads them.
func Options() []Option { return slices.Clone(options) }

// Documentation groups, in the order they are documented.
const (
	groupDatabase   = "Database"
	groupHTTP       = "HTTP server"
	groupSources    = "Sources"
	groupClaim      = "Claim and apply"
	groupRetention  = "Retention and payloads"
	groupRedis      = "Redis short-circuit"
	groupAPIs       = "Provider APIs, replay and reconciliation"
	groupOperations = "Admin, metrics and logs"
	groupTracing    = "Tracing"
	groupProfiling  = "Profiling"
)

// forever is the longest duration: no upper bound.
const forever = time.Duration(math.MaxInt64)

var options = []Option{
	{Name: "DATABASE_URL", Group: groupDatabase, Secret: true, DefaultDoc: "(required)",
		Doc: "PostgreSQL URL, required by `serve`, `migrate` and replay's direct mode, e.g. `postgres://postgres@127.0.0.1:5432/hookledger?sslmode=disable`. " +
			"A multi-host URL with `target_session_attrs=read-write` reaches whichever host is the primary, so a failed-over cluster is found again.",
		set: text(func(c *Config) *Secret { return &c.DatabaseURL })},
	{Name: "DATABASE_POOLER", Group: groupDatabase, Default: string(PoolerNone),
		Doc: "`transaction` when `DATABASE_URL` is a pooler in transaction mode (PgBouncer `pool_mode=transaction`, the poolers of managed PostgreSQL): " +
			"queries go without named prepared statements, and workers poll for jobs unless `DATABASE_DIRECT_URL` is set (see docs/DEPLOYING.md). " +
			"`none`: `DATABASE_URL` reaches PostgreSQL itself, or a pooler in session mode.",
		set: oneOf(func(c *Config) *DatabasePooler { return &c.DatabasePooler }, PoolerNone, PoolerTransaction)},
	{Name: "DATABASE_DIRECT_URL", Group: groupDatabase, Secret: true,
		Doc: "PostgreSQL itself, past the pooler: River's `LISTEN` and `hookledger migrate` (which holds a session-level lock) use it.",
		set: text(func(c *Config) *Secret { return &c.DatabaseDirectURL })},
	{Name: "DB_MAX_CONNS", Group: groupDatabase, Default: strconv.Itoa(DefaultDBMaxConns),
		Doc: "Size of the pgx pool, shared by HTTP claims, workers and River.",
		set: count(func(c *Config) *int { return &c.DBMaxConns })},

	{Name: "HTTP_ADDR", Group: groupHTTP, Default: DefaultHTTPAddr,
		Doc: "Listen address. Every role serves `/healthz`, `/readyz` and `/metrics` there; roles `all` and `http` take webhooks at `POST /webhooks/<source>`. " +
			"Unset, `task dev` listens on `127.0.0.1:8080`, this machine only, since its Stripe secret is public.",
		set: text(func(c *Config) *string { return &c.HTTPAddr })},
	{Name: "HTTP_READ_HEADER_TIMEOUT", Group: groupHTTP, Default: "5s",
		Doc: "How long a client may take to send its request headers. A positive duration; over 1m starts with a warning (a client that trickles headers holds a connection that long).",
		set: duration(func(c *Config) *time.Duration { return &c.ReadHeaderTimeout }, within(1, forever, slowClient))},
	{Name: "HTTP_READ_TIMEOUT", Group: groupHTTP, Default: "30s",
		Doc: "How long a client may take to send its whole request; past it the answer is `408` and the connection is closed. " +
			"A positive duration; over 5m starts with a warning.",
		set: duration(func(c *Config) *time.Duration { return &c.ReadTimeout }, within(1, forever, slowClient))},
	{Name: "MAX_BODY_BYTES", Group: groupHTTP, DefaultDoc: "per provider (see Providers)",
		Doc: "Body limit in bytes. A larger body gets `413` naming the limit and is read no further; a body of exactly the limit is accepted. " +
			"Unset, each source takes its provider's documented maximum payload where that is larger than 1 MiB (1048576), else 1 MiB; set, it caps every source. " +
			"At most 33554432 (32 MiB): every in-flight body may hold this much memory.",
		set: setMaxBodyBytes},
	{Name: "MAX_INFLIGHT_BODY_BYTES", Group: groupHTTP, DefaultDoc: "larger of 64 MiB and 8 × `MAX_BODY_BYTES`",
		Doc: "Body bytes being read at once, server-wide, counted as they arrive; one client address holds at most a quarter (at least `MAX_BODY_BYTES`), " +
			"one source at most half (at least one body of its limit); an eighth is kept for bodies of at most 64 KiB, shared by the sources, " +
			"and an eighth for clients in their source's `allow_ips`. " +
			"Past either, `503` with `Retry-After`: memory never grows with a client's declared Content-Length. " +
			"A body slower than 1 KiB/s after its first 5 s gets `408`. Not below `MAX_BODY_BYTES`.",
		set: setInflightBodyBytes},
	{Name: "TRUSTED_PROXIES", Group: groupHTTP, DefaultDoc: "(none)",
		Doc: "CIDRs or addresses, comma-separated, of the proxies whose `X-Forwarded-For` gives the client address (for `allow_ips`, the admin throttle and the logs). " +
			"Without them the client address is the connection's; with them it is the `X-Forwarded-For` hop next to the nearest trusted proxy " +
			"(hops a client wrote itself further left are ignored). That holds only for proxies that append the address they saw, as load balancers " +
			"and nginx's `$proxy_add_x_forwarded_for` do: a relay that copies the client's header and appends nothing (a webhook relay or queue) " +
			"must not be listed, or any client names its own address (see docs/DEPLOYING.md). A network holding every address (`0.0.0.0/0`, `::/0`) is refused.",
		set: setTrustedProxies},

	{Name: "STRIPE_WEBHOOK_SECRET", Group: groupSources, Secret: true, Provider: "stripe",
		Doc: "The endpoint's signing secret (from the Dashboard, or printed by `stripe listen`); thin events are verified with it too."},
	{Name: "GITHUB_WEBHOOK_SECRET", Group: groupSources, Secret: true, Provider: "github",
		Doc: "The webhook's secret (repository or organisation settings). Set the content type to `application/json`: form payloads are refused with `400`."},
	{Name: "SHOPIFY_WEBHOOK_SECRET", Group: groupSources, Secret: true, Provider: "shopify",
		Doc: "The app's client secret."},
	{Name: "PADDLE_WEBHOOK_SECRET", Group: groupSources, Secret: true, Provider: "paddle",
		Doc: "The notification destination's secret key (Paddle Billing). During a rotation Paddle sends one `h1` per active key; any configured secret may match any of them."},
	{Name: "SLACK_SIGNING_SECRET", Group: groupSources, Secret: true, Provider: "slack",
		Doc: "The Slack app's signing secret (Basic Information). Slack waits 3 s for an answer: keep `CLAIM_TIMEOUT` at its default or lower."},
	{Name: "STANDARD_WEBHOOK_SECRET", Group: groupSources, Secret: true, Provider: "standard",
		Doc: "The sender's `v1` secret (`whsec_` and base64) for Standard Webhooks and Svix. A `whpk_` public key is refused here, and so is a `whsk_` signing key."},
	{Name: "STANDARD_WEBHOOK_PUBLIC_KEY", Group: groupSources, Secret: true, Provider: "standard", PublicKeys: true,
		Doc: "The sender's ed25519 public keys for `v1a` signatures, comma-separated for rotation; they enable `standard` alone or beside `STANDARD_WEBHOOK_SECRET` " +
			"(`secret_index` counts the secrets, then the keys). Each must be `whpk_` and the base64 of the 32-byte key: a key without the prefix, a `whsec_` secret " +
			"or a `whsk_` signing key is refused at start-up."},
	{Name: "HOOKLEDGER_CONFIG", Group: groupSources,
		Doc: "A YAML file of more sources (a second account, a legacy endpoint, a sender that needs an id fallback); see The config file below.",
		set: text(func(c *Config) *string { return &c.ConfigFile })},
	{Name: "REPLAY_TOKEN", Group: groupSources, Secret: true,
		Doc: "A delivery whose `X-Replay-Token` equals it (compared in constant time) skips signature verification and its row is marked replayed: " +
			"`hookledger replay --target` sends it. Honoured only on Stripe and Paddle sources, whose replay re-posts events with it (`replay github` asks GitHub " +
			"to redeliver, signed; see Providers); elsewhere the delivery is verified as usual. Wrong tokens are throttled per client address as wrong " +
			"admin tokens are (`429`). Ignored when unset; a config-file source may carry its own (`replay_token_env`). Shorter than 16 bytes starts with a warning.",
		set: text(func(c *Config) *Secret { return &c.ReplayToken })},
	{Name: "PUBLISHED_IPS_FILE", Group: groupSources, DefaultDoc: "the copy shipped in the binary",
		Doc: "Where `hookledger ips update` keeps the senders' published address lists (Stripe's `ips_webhooks.json`, GitHub's `/meta` `hooks`) " +
			"that a source's `allow_ips: [stripe]` or `[github]` names.",
		set: text(func(c *Config) *string { return &c.PublishedIPsFile })},
	{Name: "PUBLISHED_IPS_MAX_AGE", Group: groupSources, Default: "720h",
		Doc: "A published list older than this (since the `fetched_at` that `hookledger ips update` recorded) is still enforced, and reported: " +
			"a warning at start-up for a stale `PUBLISHED_IPS_FILE` (the shipped copy is only named in an info line) and " +
			"`hookledger_published_ips_stale{list} 1`. The shipped copy is dated 2026-11-01, so it reads stale: refresh a `PUBLISHED_IPS_FILE` instead.",
		set: duration(func(c *Config) *time.Duration { return &c.PublishedIPsMaxAge }, within(1, forever, "a positive duration such as 720h"))},

	{Name: "CLAIM_TIMEOUT", Group: groupClaim, Default: DefaultClaimTimeout.String(),
		Doc: "A claim that cannot commit in time answers `503`, so the provider retries; the default is well inside Slack's 3 s and Paddle's and Shopify's 5 s. " +
			"Over 10s starts with a warning.",
		set: duration(func(c *Config) *time.Duration { return &c.ClaimTimeout }, within(1, forever, "a positive duration such as 2s"))},
	{Name: "CLAIM_MODE", Group: groupClaim, Default: string(ClaimEnforce),
		Doc: "`log-only` is for adopting hookledger where duplicates were never caught: a duplicate is still answered `duplicate`, logged as \"would skip\" " +
			"and counted, then applied again as a receiver without a ledger would (version-guarded handlers shrug it off, delta handlers do not; see docs/migrating.md). " +
			"It turns the Redis short-circuit off.",
		set: oneOf(func(c *Config) *ClaimMode { return &c.ClaimMode }, ClaimEnforce, ClaimLogOnly)},
	{Name: "CLAIM_GROUP_COMMIT", Group: groupClaim, Default: "true",
		Doc: "Group commit: concurrent claims share one statement, which claims the batch and inserts its apply job (`true` or `1`, `false` or `0`).",
		set: setGroupCommit},
	{Name: "CLAIM_COMMITTERS", Group: groupClaim, Default: strconv.Itoa(DefaultClaimCommitters),
		Doc: "Group-commit statements in flight at once; requests that arrive while all are busy ride in the next batch.",
		set: count(func(c *Config) *int { return &c.ClaimCommitters })},
	{Name: "CLAIM_BATCH_MAX", Group: groupClaim, Default: "256",
		Doc: "The most claims in one group-commit batch.",
		set: count(func(c *Config) *int { return &c.ClaimBatchMax })},
	{Name: "WORKERS", Group: groupClaim, Default: strconv.Itoa(DefaultWorkers),
		Doc: "Concurrent apply jobs per worker process (roles `all` and `worker`).",
		set: count(func(c *Config) *int { return &c.Workers })},
	{Name: "APPLY_LINGER", Group: groupClaim, Default: DefaultApplyLinger.String(),
		Doc: "How old a claim's apply job is before it takes its batch: under load the claims of that time apply in one transaction. " +
			"`0` applies at once; at most `1s`.",
		set: duration(func(c *Config) *time.Duration { return &c.ApplyLinger },
			within(0, MaxApplyLinger, fmt.Sprintf("a duration from 0 (apply at once) to %s", MaxApplyLinger)))},

	{Name: "LEDGER_SWEEP_INTERVAL", Group: groupClaim, Default: "1m",
		Doc: "How often the leader's sweep looks for claimed events whose apply job River no longer runs (cancelled or deleted in River UI, " +
			"given up on by the rescuer, lost): one whose job is gone gets a new one, one whose job River stopped becomes `failed` with " +
			"a reason naming it. It also runs at start. At least `1s`.",
		set: duration(func(c *Config) *time.Duration { return &c.SweepInterval },
			within(time.Second, 24*time.Hour, "a duration from 1s to 24h"))},

	{Name: "RETENTION", Group: groupRetention, Default: "2160h",
		Doc: "How long settled ledger rows are kept; an hourly job prunes older ones. A pruned event's keys are kept for `KEY_RETENTION`, " +
			"so its redelivery is still `duplicate`, but its stored body goes. Below `720h`, Stripe's replay window (the 30 days of events " +
			"`hookledger replay stripe` reads), start-up refuses it: a redelivery or replay of an event Stripe still holds is compared with " +
			"its stored body (`hookledger_duplicate_mismatch_total`), and the event can be shown or requeued from the ledger.",
		set: duration(func(c *Config) *time.Duration { return &c.Retention }, func(d time.Duration) string {
			if d < MinRetention {
				return fmt.Sprintf(" is below %s, Stripe's replay window (the 30 days of events hookledger replay stripe reads): "+
					"a pruned event's keys are kept for KEY_RETENTION, so its redelivery is still a duplicate, but its stored body is gone, "+
					"so a redelivery or replay of an event Stripe still holds could not be compared with it, shown or requeued", MinRetention)
			}
			return ""
		})},
	{Name: "KEY_RETENTION", Group: groupRetention, Default: "9600h",
		Doc: "How long a pruned event's dedup keys are kept, counted from its receipt: its redelivery stays `duplicate` meanwhile. " +
			"`0` keeps them for ever; otherwise at least `RETENTION`.",
		set: duration(func(c *Config) *time.Duration { return &c.KeyRetention }, nil)},
	{Name: "PAYLOAD_KEYS", Group: groupRetention, Secret: true, DefaultDoc: "(plaintext)",
		Doc: "Base64 32-byte keys, comma-separated (`openssl rand -base64 32`): payloads are sealed at the claim with the first (AES-256-GCM), opened with any. " +
			"To rotate, put the new key first, run `hookledger payloads rekey`, then drop the old one. Unset stores plaintext.",
		set: setPayloadKeys},

	{Name: "REDIS_URL", Group: groupRedis, Secret: true, DefaultDoc: "(no Redis)",
		Doc: "A short-circuit in front of the ledger for duplicates: `redis://host:port[/db]`, `rediss://` (TLS) or `unix:///path`. " +
			"Redis is never the source of truth: when it is down or slow, deliveries go to PostgreSQL as without it.",
		set: setRedisURL},
	{Name: "REDIS_TTL", Group: groupRedis, Default: "60s",
		Doc: "A marker's lifetime, from `1s` to `10m`: markers absorb retry storms; the ledger is the record.",
		set: duration(func(c *Config) *time.Duration { return &c.RedisTTL }, within(time.Second, MaxRedisTTL,
			fmt.Sprintf("a duration from 1s to %s such as 60s (markers absorb retry storms; the ledger is the record)", MaxRedisTTL)))},
	{Name: "REDIS_TIMEOUT", Group: groupRedis, Default: DefaultRedisTimeout.String(),
		Doc: "The shortest a Redis lookup waits: each waits twice the p99 of recent lookups, at most `100ms` (or `REDIS_TIMEOUT` when longer, up to `1s`).",
		set: duration(func(c *Config) *time.Duration { return &c.RedisTimeout }, within(1, time.Second,
			"a small positive duration such as 5ms (at most 1s: Redis must never slow an answer down)"))},
	{Name: "REDIS_KEY_PREFIX", Group: groupRedis, Default: DefaultRedisKeyPrefix,
		Doc: "Starts every marker key, before the ledger's identity.",
		set: text(func(c *Config) *string { return &c.RedisKeyPrefix })},

	{Name: "STRIPE_API_KEY", Group: groupAPIs, Secret: true,
		Doc: "Stripe's API for replay, reconciliation, the drift check, thin events' objects and the re-fetch that resolves version ties.",
		set: text(func(c *Config) *Secret { return &c.StripeAPIKey })},
	{Name: "STRIPE_API_BASE", Group: groupAPIs, Default: "https://api.stripe.com",
		Doc: "Base URL of Stripe's API, without `/v1`.",
		set: baseURL(func(c *Config) *string { return &c.StripeAPIBase })},
	{Name: "GITHUB_TOKEN", Group: groupAPIs, Secret: true,
		Doc: "GitHub's API for `hookledger replay github`.",
		set: text(func(c *Config) *Secret { return &c.GitHubToken })},
	{Name: "GITHUB_API_BASE", Group: groupAPIs, Default: "https://api.github.com",
		Doc: "Base URL of GitHub's API.",
		set: baseURL(func(c *Config) *string { return &c.GitHubAPIBase })},
	{Name: "PADDLE_API_KEY", Group: groupAPIs, Secret: true,
		Doc: "Paddle's API for `hookledger replay paddle`.",
		set: text(func(c *Config) *Secret { return &c.PaddleAPIKey })},
	{Name: "PADDLE_API_BASE", Group: groupAPIs, Default: "https://api.paddle.com",
		Doc: "Base URL of Paddle's API.",
		set: baseURL(func(c *Config) *string { return &c.PaddleAPIBase })},
	{Name: "RECONCILE_INTERVAL", Group: groupAPIs, Default: "0", DefaultDoc: "`0` (off)",
		Doc: "Scheduled Stripe reconciliation: every interval, the elected leader pages Stripe's events of the last `RECONCILE_WINDOW` through the claim. Needs `STRIPE_API_KEY`.",
		set: duration(func(c *Config) *time.Duration { return &c.ReconcileInterval }, nil)},
	{Name: "RECONCILE_WINDOW", Group: groupAPIs, Default: "1h",
		Doc: "How far back each reconciliation looks; a positive duration.",
		set: duration(func(c *Config) *time.Duration { return &c.ReconcileWindow }, nil)},
	{Name: "RECONCILE_SOURCE", Group: groupAPIs, Default: "stripe",
		Doc: "The source whose namespace reconciliation claims into.",
		set: text(func(c *Config) *string { return &c.ReconcileSource })},
	{Name: "DRIFT_INTERVAL", Group: groupAPIs, Default: "0", DefaultDoc: "`0` (off)",
		Doc: "Scheduled drift check of the `stripe` source's namespace against Stripe's subscriptions, payment intents, invoices and customers' active entitlements " +
			"(one request per customer; needs `STRIPE_API_KEY`): " +
			"the elected leader runs it, sets `hookledger_drift_objects{kind}` and logs a summary; it repairs nothing (`hookledger drift stripe --fix` does).",
		set: duration(func(c *Config) *time.Duration { return &c.DriftInterval }, within(0, forever, "an interval of 0 (off) or more"))},

	{Name: "ADMIN_TOKEN", Group: groupOperations, Secret: true, DefaultDoc: "(admin surfaces off)",
		Doc: "Turns on the admin API (`/admin/`), River UI (`/riverui/`) and the ledger console (`/console/`), which answer `404` without it. " +
			"Clients send `Authorization: Bearer <token>`, or HTTP basic auth with the token as password (browsers prompt). Shorter than 16 bytes starts with a warning.",
		set: text(func(c *Config) *Secret { return &c.AdminToken })},
	{Name: "METRICS_ADDR", Group: groupOperations, DefaultDoc: "(`HTTP_ADDR`)",
		Doc: "Serve `/metrics`, and a detailed `/readyz` (schema version), on this address only; `HTTP_ADDR` then answers `/readyz` without detail.",
		set: text(func(c *Config) *string { return &c.MetricsAddr })},
	{Name: "METRICS_TOKEN", Group: groupOperations, Secret: true, DefaultDoc: "(`/metrics` public)",
		Doc: "When set, `/metrics` requires it (bearer token or basic-auth password).",
		set: text(func(c *Config) *Secret { return &c.MetricsToken })},
	{Name: "LOG_LEVEL", Group: groupOperations, Default: "info",
		Doc: "`debug`, `info`, `warn` or `error`.",
		set: oneOf(func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error")},
	{Name: "LOG_FORMAT", Group: groupOperations, Default: "json",
		Doc: "`json` or `console` (the default of `task dev`).",
		set: oneOf(func(c *Config) *string { return &c.LogFormat }, "json", "console")},

	{Name: "ALERT_WEBHOOK_URL", Group: groupOperations, Secret: true, DefaultDoc: "(alerts off)",
		Doc: "Where the elected leader POSTs an alert each time one changes state: one JSON message, `{\"status\": \"firing\"|\"resolved\", \"alert\", \"key\", \"summary\", \"text\", ...}` " +
			"(`text` makes it a Slack incoming-webhook message), delivered by a River job with retries. A secret, since such URLs carry their own token: " +
			"`ALERT_WEBHOOK_URL_FILE` reads it from a file. The rules and the message: docs/operating.md, Alerts.",
		set: webhookURL(func(c *Config) *Secret { return &c.AlertWebhookURL })},
	{Name: "ALERT_WEBHOOK_SECRET", Group: groupOperations, Secret: true, DefaultDoc: "(unsigned)",
		Doc: "Signs each alert: `X-Hookledger-Signature: sha256=<hex HMAC-SHA256 of the body, keyed with the secret's bytes>`, and, for a `whsec_` secret, " +
			"the Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`) as `hookledger verify --provider standard` checks them.",
		set: text(func(c *Config) *Secret { return &c.AlertWebhookSecret })},
	{Name: "ALERT_CHECK_INTERVAL", Group: groupOperations, Default: "1m",
		Doc: "How often the elected leader checks the alert rules (with `ALERT_WEBHOOK_URL` set). At least `1s`.",
		set: duration(func(c *Config) *time.Duration { return &c.AlertCheckInterval },
			within(time.Second, 24*time.Hour, "a duration from 1s to 24h"))},
	{Name: "ALERT_OLDEST_PENDING", Group: groupOperations, Default: "15m",
		Doc: "The alert `backlog_oldest_pending` fires while the oldest claimed or failed event is older than this.",
		set: duration(func(c *Config) *time.Duration { return &c.AlertOldestPending },
			within(time.Second, forever, "a positive duration"))},
	{Name: "ALERT_FAILED_AGE", Group: groupOperations, Default: "1h",
		Doc: "The alert `failed_events` fires while an event has been `failed` for longer than this: failures nobody has requeued or discarded since their `failure_group` message.",
		set: duration(func(c *Config) *time.Duration { return &c.AlertFailedAge },
			within(time.Second, forever, "a positive duration"))},
	{Name: "ALERT_SIGNATURE_FAILURES", Group: groupOperations, Default: "10",
		Doc: "The alert `signature_failures` fires for a source while it refused at least this many signatures in the last 5 minutes " +
			"(a rotated secret that the sender does not use yet: every delivery answered `401`).",
		set: count(func(c *Config) *int { return &c.AlertSignatureFailures })},

	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Group: groupTracing,
		Doc: "Turns on OpenTelemetry tracing over OTLP; unset, tracing is off and costs nothing. The exporter reads the other standard `OTEL_*` variables " +
			"(headers, TLS, timeout, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, the sampler) itself."},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Group: groupTracing,
		Doc: "The same, for traces only."},
	{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Group: groupTracing, Default: "http/protobuf",
		Doc: "`http/protobuf` or `grpc`."},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Group: groupTracing, DefaultDoc: "`OTEL_EXPORTER_OTLP_PROTOCOL`",
		Doc: "The same, for traces only."},
	{Name: "OTEL_SDK_DISABLED", Group: groupTracing,
		Doc: "`true` turns tracing off."},
	{Name: "OTEL_TRACES_EXPORTER", Group: groupTracing, DefaultDoc: "`otlp`",
		Doc: "Anything but `otlp` (such as `none`) turns tracing off."},

	{Name: "HOOKLEDGER_CPUPROFILE", Group: groupProfiling,
		Doc: "For measuring, never on by default: `serve` writes a CPU profile to `<path>.<role>.<pid>` and, when it stops, its allocations to the same name with `.allocs`.",
		set: text(func(c *Config) *string { return &c.CPUProfile })},
	{Name: "GOGC", Group: groupProfiling, DefaultDoc: "`200` in `serve`",
		Doc: "The Go garbage collector's target. The live heap is small and every request allocates its body, so `serve` runs at 200 unless `GOGC` is set.",
		set: text(func(c *Config) *string { return &c.GOGC })},
}

// slowClient is what HTTP_READ_HEADER_TIMEOUT and HTTP_READ_TIMEOUT want.
const slowClient = "a positive duration (0 would mean no limit, and a slow client could hold a connection for ever)"

// webhookURL sets an http or https URL kept as a Secret.
func webhookURL(field func(*Config) *Secret) setFunc {
	return func(c *Config, name, v string) error {
		if u, err := url.Parse(v); v != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			return fmt.Errorf("%s: want an http:// or https:// URL", name)
		}
		*field(c) = Secret(v)
		return nil
	}
}

// text sets a string or a Secret as it is.
func text[T ~string](field func(*Config) *T) setFunc {
	return func(c *Config, _, v string) error {
		*field(c) = T(v)
		return nil
	}
}

// baseURL sets a URL without its trailing slashes.
func baseURL(field func(*Config) *string) setFunc {
	set := text(field)
	return func(c *Config, name, v string) error { return set(c, name, strings.TrimRight(v, "/")) }
}

// oneOf sets a value that must be one of choices.
func oneOf[T ~string](field func(*Config) *T, choices ...T) setFunc {
	return func(c *Config, name, v string) error {
		*field(c) = T(v)
		if !slices.Contains(choices, T(v)) {
			return fmt.Errorf("%s=%q: want %s", name, v, list(choices, "or"))
		}
		return nil
	}
}

// count sets a positive whole number.
func count(field func(*Config) *int) setFunc {
	return func(c *Config, name, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s=%q: want a positive whole number", name, v)
		}
		*field(c) = n
		return nil
	}
}

// duration sets a Go duration or plain seconds (ParseDuration). check,
// when not nil, says what is wrong with a duration that parsed, in words
// that follow "NAME=value"; the value is kept either way.
func duration(field func(*Config) *time.Duration, check func(time.Duration) string) setFunc {
	return func(c *Config, name, v string) error {
		d, err := ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s=%q: want a duration such as 2s or 720h", name, v)
		}
		*field(c) = d
		if check == nil {
			return nil
		}
		if problem := check(d); problem != "" {
			return fmt.Errorf("%s=%s%s", name, d, problem)
		}
		return nil
	}
}

// within is a duration check: from lo to hi, or want.
func within(lo, hi time.Duration, want string) func(time.Duration) string {
	return func(d time.Duration) string {
		if d < lo || d > hi {
			return ": want " + want
		}
		return ""
	}
}

// setMaxBodyBytes reads MAX_BODY_BYTES; set, it caps every source.
func setMaxBodyBytes(c *Config, name, v string) error {
	if v == "" {
		c.MaxBodyBytes = DefaultMaxBodyBytes
		return nil
	}
	c.MaxBodyBytesSet = true
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil || n <= 0:
		return fmt.Errorf("%s=%q: want a positive number of bytes", name, v)
	case n > MaxMaxBodyBytes:
		return fmt.Errorf("%s=%d is over %d (32 MiB), above any provider's payload cap: every in-flight body may hold this much memory", name, n, MaxMaxBodyBytes)
	}
	c.MaxBodyBytes = n
	return nil
}

// setInflightBodyBytes reads MAX_INFLIGHT_BODY_BYTES, whose default and
// floor follow from MAX_BODY_BYTES (read before it).
func setInflightBodyBytes(c *Config, name, v string) error {
	if v == "" {
		c.InflightBodyBytes = max(DefaultInflightBodyBytes, 8*c.MaxBodyBytes)
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil || n <= 0:
		return fmt.Errorf("%s=%q: want a positive number of bytes", name, v)
	case n < c.MaxBodyBytes:
		return fmt.Errorf("%s=%d is below MAX_BODY_BYTES=%d: a body of the limit could never be read", name, n, c.MaxBodyBytes)
	}
	c.InflightBodyBytes = n
	return nil
}

func setGroupCommit(c *Config, name, v string) error {
	c.GroupCommit = v == "true" || v == "1"
	if !c.GroupCommit && v != "false" && v != "0" {
		return fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return nil
}

// setTrustedProxies keeps every entry, and names each that is neither a
// network nor an address.
func setTrustedProxies(c *Config, name, v string) error {
	var errs []error
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !isNetwork(p) {
			errs = append(errs, fmt.Errorf("%s: %q is neither a CIDR nor an address", name, p))
		}
		c.TrustedProxies = append(c.TrustedProxies, p)
	}
	return errors.Join(errs...)
}

// setPayloadKeys keeps the keys that are 32 bytes of base64 and names the
// others by position, never by value.
func setPayloadKeys(c *Config, name, v string) error {
	var errs []error
	for i, k := range strings.Split(v, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if raw, err := base64.StdEncoding.DecodeString(k); err != nil || len(raw) != PayloadKeySize {
			errs = append(errs, fmt.Errorf("%s: key %d is not %d bytes in standard base64 (make one with: openssl rand -base64 32)", name, i+1, PayloadKeySize))
			continue
		}
		c.PayloadKeys = append(c.PayloadKeys, Secret(k))
	}
	return errors.Join(errs...)
}

// setRedisURL takes a Redis URL; the message never repeats it, since it
// may hold a password.
func setRedisURL(c *Config, name, v string) error {
	c.RedisURL = Secret(v)
	if v == "" {
		return nil
	}
	if u, err := url.Parse(v); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		return fmt.Errorf("%s: want redis://host:port[/db], rediss:// (TLS) or unix:///path", name)
	}
	return nil
}

// list joins items as a sentence does: "a, b or c" (with "or"), "a and
// b" (with "and").
func list[T ~string](items []T, conj string) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = string(it)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " " + conj + " " + s[len(s)-1]
}
