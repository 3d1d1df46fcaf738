// Package config loads hookledger's configuration from the environment,
// validates it once at start-up and prints it with every secret redacted.
// Nothing else in hookledger reads the environment.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults that PRODUCT users rely on.
const (
	DefaultHTTPAddr     = ":8080"
	DefaultMaxBodyBytes = 1 << 20
	// MaxMaxBodyBytes is the largest MAX_BODY_BYTES start-up accepts: above
	// every provider's own payload cap (GitHub's is 25 MB).
	MaxMaxBodyBytes = 32 << 20
	// DefaultInflightBodyBytes is the default budget of request-body bytes
	// held by all in-flight deliveries together.
	DefaultInflightBodyBytes = 64 << 20
	DefaultClaimTimeout      = 2 * time.Second
	DefaultRetention         = 2160 * time.Hour
	// DefaultKeyRetention is how long a pruned event's dedup keys are
	// kept, counted from its receipt: 400 days, longer than any
	// provider's replay or redelivery window.
	DefaultKeyRetention = 9600 * time.Hour
	// PayloadKeySize is the length of a PAYLOAD_KEYS key: AES-256.
	PayloadKeySize = 32
	DefaultWorkers = 4
	// DefaultClaimCommitters is the group-commit statements in flight at
	// once. A claim is one round trip: one committer gathers twice the
	// batch two do, at a lower cost per event in PostgreSQL.
	DefaultClaimCommitters = 1
	// DefaultApplyLinger is how old a claim's apply job is before it takes
	// its batch: under load, the claims of that time apply in one
	// transaction.
	DefaultApplyLinger = 50 * time.Millisecond
	// MaxApplyLinger bounds APPLY_LINGER: an event settles up to that much
	// later.
	MaxApplyLinger    = time.Second
	DefaultDBMaxConns = 48
	// MinRetention is Stripe's replay window: a pruned id younger than this
	// could be delivered or replayed again and claimed a second time.
	MinRetention = 720 * time.Hour
	// DefaultPublishedIPsMaxAge is when a published address list counts
	// as stale.
	DefaultPublishedIPsMaxAge = 30 * 24 * time.Hour
)

// ClaimMode says what a verified duplicate does.
type ClaimMode string

// Claim modes.
const (
	ClaimEnforce ClaimMode = "enforce"
	ClaimLogOnly ClaimMode = "log-only"
)

// Role is the part of hookledger a serve process runs.
type Role string

// Serve roles.
const (
	RoleAll    Role = "all"
	RoleHTTP   Role = "http"
	RoleWorker Role = "worker"
)

// TakesWebhooks reports whether the role answers POST /webhooks/*.
func (r Role) TakesWebhooks() bool { return r == RoleAll || r == RoleHTTP }

// WorksJobs reports whether the role runs River workers.
func (r Role) WorksJobs() bool { return r == RoleAll || r == RoleWorker }

// Secret is a string that never prints.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText redacts the secret in JSON and YAML output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret's value; call it only where the value is used.
func (s Secret) Reveal() string { return string(s) }

// Source is one webhook endpoint, POST /webhooks/<Name>.
type Source struct {
	Name      string   `json:"name"`
	Provider  string   `json:"provider"`
	Namespace string   `json:"namespace"`
	Secrets   []Secret `json:"secrets"`
	// Tolerance < 0 means the provider's default; 0 turns the check off.
	Tolerance  time.Duration `json:"tolerance"`
	IDFallback *IDFallback   `json:"id_fallback,omitempty"`
	// ReplayToken is the source's own replay token (config file); empty
	// means REPLAY_TOKEN. Honoured only for providers with a replay path.
	ReplayToken Secret `json:"replay_token,omitempty"`
	// ShareNamespace (config file) allows a namespace that sources with
	// other secrets use too.
	ShareNamespace bool `json:"share_namespace,omitempty"`
	// BodyDedup, for providers that sign only the body (GitHub, Shopify),
	// answers a delivery whose signed body equals an earlier event's under
	// another id as a duplicate (a replay with a forged id).
	BodyDedup bool `json:"body_dedup"`
	// AllowIPs (config file) are the client networks the source accepts:
	// CIDRs, addresses, or "stripe" / "github" for the published lists.
	AllowIPs []string `json:"allow_ips,omitempty"`
	// fromEnv marks a source enabled by its provider's variable.
	fromEnv bool
}

// Config is hookledger's whole configuration.
type Config struct {
	DatabaseURL Secret `json:"database_url"`
	HTTPAddr    string `json:"http_addr"`
	// MetricsAddr, when set, serves /metrics (and a detailed /readyz) on a
	// listener of its own, and no longer on HTTPAddr.
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// MetricsToken, when set, is required (bearer or basic password) on
	// /metrics.
	MetricsToken Secret `json:"metrics_token"`
	// PayloadKeys, when set, encrypt stored payloads (PAYLOAD_KEYS: base64
	// 32-byte keys, comma-separated): the first seals, all open.
	PayloadKeys []Secret `json:"payload_keys,omitempty"`
	// ReadHeaderTimeout and ReadTimeout bound slow clients.
	ReadHeaderTimeout time.Duration `json:"read_header_timeout"`
	ReadTimeout       time.Duration `json:"read_timeout"`
	LogLevel          string        `json:"log_level"`
	LogFormat         string        `json:"log_format"`
	// MaxBodyBytes is the body limit of every source when MaxBodyBytesSet
	// (MAX_BODY_BYTES), else of a source whose provider documents no
	// larger payload (the provider's maximum applies: GitHub's 25 MB).
	MaxBodyBytes    int64 `json:"max_body_bytes"`
	MaxBodyBytesSet bool  `json:"max_body_bytes_set"`
	// InflightBodyBytes bounds the body bytes of all in-flight deliveries.
	InflightBodyBytes int64         `json:"inflight_body_bytes"`
	ClaimTimeout      time.Duration `json:"claim_timeout"`
	ClaimMode         ClaimMode     `json:"claim_mode"`
	// GroupCommit gathers concurrent claims into shared transactions.
	GroupCommit     bool          `json:"group_commit"`
	ClaimCommitters int           `json:"claim_committers"`
	ClaimBatchMax   int           `json:"claim_batch_max"`
	ReplayToken     Secret        `json:"replay_token"`
	AdminToken      Secret        `json:"admin_token"`
	Retention       time.Duration `json:"retention"`
	KeyRetention    time.Duration `json:"key_retention"`
	Workers         int           `json:"workers"`
	// ApplyLinger is how old a claim's apply job is before it takes its
	// batch, so that the claims of that time apply in one transaction.
	ApplyLinger time.Duration `json:"apply_linger"`
	// ReconcileInterval > 0 turns on scheduled Stripe reconciliation.
	ReconcileInterval time.Duration `json:"reconcile_interval"`
	ReconcileWindow   time.Duration `json:"reconcile_window"`
	ReconcileSource   string        `json:"reconcile_source"`
	DBMaxConns        int           `json:"db_max_conns"`
	Sources           []Source      `json:"sources"`
	// Disabled lists config-file sources left off for want of a secret.
	Disabled   []string `json:"disabled,omitempty"`
	ConfigFile string   `json:"config_file,omitempty"`
	// Warnings are configuration choices that load but look wrong; serve
	// logs them at start-up.
	Warnings []string `json:"warnings,omitempty"`

	// RedisURL, when set, puts the duplicate short-circuit in front of the
	// claim; RedisTTL is a marker's lifetime; RedisTimeout is the shortest
	// a Redis lookup waits (each waits twice the p99 of recent lookups, at
	// most 100 ms, or RedisTimeout when longer); RedisKeyPrefix starts
	// every key.
	RedisURL       Secret        `json:"redis_url"`
	RedisTTL       time.Duration `json:"redis_ttl"`
	RedisTimeout   time.Duration `json:"redis_timeout"`
	RedisKeyPrefix string        `json:"redis_key_prefix"`
	// TrustedProxies are the proxies (CIDRs) whose X-Forwarded-For gives
	// the client address; none by default: the connection's address is it.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
	// PublishedIPsFile is where `hookledger ips update` keeps the
	// providers' published address lists; empty: the shipped copy.
	PublishedIPsFile string `json:"published_ips_file,omitempty"`
	// PublishedIPsMaxAge is the age past which a published list is
	// reported stale.
	PublishedIPsMaxAge time.Duration `json:"published_ips_max_age"`
	// DriftInterval > 0 turns on the scheduled drift check of the stripe
	// source's namespace against Stripe's objects.
	DriftInterval time.Duration `json:"drift_interval"`

	StripeAPIKey  Secret `json:"stripe_api_key"`
	StripeAPIBase string `json:"stripe_api_base"`
	GitHubToken   Secret `json:"github_token"`
	GitHubAPIBase string `json:"github_api_base"`
	PaddleAPIKey  Secret `json:"paddle_api_key"`
	PaddleAPIBase string `json:"paddle_api_base"`

	// DatabasePooler and DatabaseDirectURL: see deploy.go.
	DatabasePooler    DatabasePooler `json:"database_pooler"`
	DatabaseDirectURL Secret         `json:"database_direct_url"`
	// Tracing is on when the standard OTEL_* variables ask for OTLP traces;
	// TracingProtocol is then grpc or http/protobuf.
	Tracing         bool   `json:"tracing"`
	TracingProtocol string `json:"tracing_protocol,omitempty"`
}

// providerEnv maps each provider to the variable holding its secrets.
var providerEnv = []struct{ provider, env string }{
	{"stripe", "STRIPE_WEBHOOK_SECRET"},
	{"github", "GITHUB_WEBHOOK_SECRET"},
	{"shopify", "SHOPIFY_WEBHOOK_SECRET"},
	{"paddle", "PADDLE_WEBHOOK_SECRET"},
	{"slack", "SLACK_SIGNING_SECRET"},
	{"standard", "STANDARD_WEBHOOK_SECRET"},
}

// Load reads the configuration from the process environment.
func Load() (*Config, error) { return FromEnv(os.Getenv) }

// FromEnv reads the configuration through getenv and validates it. Every
// problem is reported, not only the first.
func FromEnv(getenv func(string) string) (*Config, error) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	secret := func(name string) Secret {
		v, err := secretVar(getenv, name)
		if err != nil {
			errs = append(errs, err)
		}
		return Secret(strings.TrimSpace(v))
	}
	c := &Config{
		DatabaseURL:   secret("DATABASE_URL"),
		HTTPAddr:      or(getenv("HTTP_ADDR"), DefaultHTTPAddr),
		MetricsAddr:   getenv("METRICS_ADDR"),
		MetricsToken:  secret("METRICS_TOKEN"),
		LogLevel:      or(getenv("LOG_LEVEL"), "info"),
		LogFormat:     or(getenv("LOG_FORMAT"), "json"),
		ClaimMode:     ClaimMode(or(getenv("CLAIM_MODE"), string(ClaimEnforce))),
		ReplayToken:   secret("REPLAY_TOKEN"),
		AdminToken:    secret("ADMIN_TOKEN"),
		RedisURL:      secret("REDIS_URL"),
		StripeAPIKey:  secret("STRIPE_API_KEY"),
		StripeAPIBase: strings.TrimRight(or(getenv("STRIPE_API_BASE"), "https://api.stripe.com"), "/"),
		GitHubToken:   secret("GITHUB_TOKEN"),
		GitHubAPIBase: strings.TrimRight(or(getenv("GITHUB_API_BASE"), "https://api.github.com"), "/"),
		PaddleAPIKey:  secret("PADDLE_API_KEY"),
		PaddleAPIBase: strings.TrimRight(or(getenv("PADDLE_API_BASE"), "https://api.paddle.com"), "/"),
	}

	c.MaxBodyBytes = DefaultMaxBodyBytes
	if v := getenv("MAX_BODY_BYTES"); v != "" {
		c.MaxBodyBytesSet = true
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n <= 0:
			fail("MAX_BODY_BYTES=%q: want a positive number of bytes", v)
		case n > MaxMaxBodyBytes:
			fail("MAX_BODY_BYTES=%d is over %d (32 MiB), above any provider's payload cap: every in-flight body may hold this much memory", n, MaxMaxBodyBytes)
		default:
			c.MaxBodyBytes = n
		}
	}
	c.InflightBodyBytes = max(DefaultInflightBodyBytes, 8*c.MaxBodyBytes)
	if v := getenv("MAX_INFLIGHT_BODY_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n <= 0:
			fail("MAX_INFLIGHT_BODY_BYTES=%q: want a positive number of bytes", v)
		case n < c.MaxBodyBytes:
			fail("MAX_INFLIGHT_BODY_BYTES=%d is below MAX_BODY_BYTES=%d: a body of the limit could never be read", n, c.MaxBodyBytes)
		default:
			c.InflightBodyBytes = n
		}
	}
	c.Workers = intVar(getenv, "WORKERS", DefaultWorkers, fail)
	c.ApplyLinger = durationVar(getenv, "APPLY_LINGER", DefaultApplyLinger, fail)
	if c.ApplyLinger < 0 || c.ApplyLinger > MaxApplyLinger {
		fail("APPLY_LINGER=%s: want a duration from 0 (apply at once) to %s", c.ApplyLinger, MaxApplyLinger)
	}
	c.ClaimCommitters = intVar(getenv, "CLAIM_COMMITTERS", DefaultClaimCommitters, fail)
	c.ClaimBatchMax = intVar(getenv, "CLAIM_BATCH_MAX", 256, fail)
	switch v := or(getenv("CLAIM_GROUP_COMMIT"), "true"); v {
	case "true", "1":
		c.GroupCommit = true
	case "false", "0":
	default:
		fail("CLAIM_GROUP_COMMIT=%q: want true or false", v)
	}
	c.DBMaxConns = intVar(getenv, "DB_MAX_CONNS", DefaultDBMaxConns, fail)
	c.loadDeploy(getenv, secret, fail)
	c.ReadHeaderTimeout = durationVar(getenv, "HTTP_READ_HEADER_TIMEOUT", 5*time.Second, fail)
	c.ReadTimeout = durationVar(getenv, "HTTP_READ_TIMEOUT", 30*time.Second, fail)
	for name, d := range map[string]time.Duration{"HTTP_READ_HEADER_TIMEOUT": c.ReadHeaderTimeout, "HTTP_READ_TIMEOUT": c.ReadTimeout} {
		if d <= 0 {
			fail("%s=%s: want a positive duration (0 would mean no limit, and a slow client could hold a connection for ever)", name, d)
		}
	}
	c.ReconcileInterval = durationVar(getenv, "RECONCILE_INTERVAL", 0, fail)
	c.ReconcileWindow = durationVar(getenv, "RECONCILE_WINDOW", time.Hour, fail)
	if c.ReconcileInterval < 0 || c.ReconcileWindow <= 0 {
		fail("RECONCILE_INTERVAL=%s, RECONCILE_WINDOW=%s: want an interval of 0 (off) or more and a positive window", c.ReconcileInterval, c.ReconcileWindow)
	}
	c.ReconcileSource = or(getenv("RECONCILE_SOURCE"), "stripe")
	c.DriftInterval = durationVar(getenv, "DRIFT_INTERVAL", 0, fail)
	if c.DriftInterval < 0 {
		fail("DRIFT_INTERVAL=%s: want an interval of 0 (off) or more", c.DriftInterval)
	}
	c.loadRedis(getenv, fail)
	for _, p := range strings.Split(getenv("TRUSTED_PROXIES"), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !isNetwork(p) {
			fail("TRUSTED_PROXIES: %q is neither a CIDR nor an address", p)
		}
		c.TrustedProxies = append(c.TrustedProxies, p)
	}
	c.PublishedIPsFile = getenv("PUBLISHED_IPS_FILE")
	c.PublishedIPsMaxAge = durationVar(getenv, "PUBLISHED_IPS_MAX_AGE", DefaultPublishedIPsMaxAge, fail)
	if c.PublishedIPsMaxAge <= 0 {
		fail("PUBLISHED_IPS_MAX_AGE=%s: want a positive duration such as 720h", c.PublishedIPsMaxAge)
	}
	c.ClaimTimeout = durationVar(getenv, "CLAIM_TIMEOUT", DefaultClaimTimeout, fail)
	if c.ClaimTimeout <= 0 {
		fail("CLAIM_TIMEOUT=%s: want a positive duration such as 2s", c.ClaimTimeout)
	}
	c.Retention = durationVar(getenv, "RETENTION", DefaultRetention, fail)
	if c.Retention < MinRetention {
		fail("RETENTION=%s is below %s, Stripe's replay window: a pruned event id could be delivered again and applied twice", c.Retention, MinRetention)
	}
	for i, k := range strings.Split(string(secret("PAYLOAD_KEYS")), ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if raw, err := base64.StdEncoding.DecodeString(k); err != nil || len(raw) != PayloadKeySize {
			fail("PAYLOAD_KEYS: key %d is not %d bytes in standard base64 (make one with: openssl rand -base64 32)", i+1, PayloadKeySize)
			continue
		}
		c.PayloadKeys = append(c.PayloadKeys, Secret(k))
	}
	c.KeyRetention = durationVar(getenv, "KEY_RETENTION", DefaultKeyRetention, fail)
	if c.KeyRetention != 0 && c.KeyRetention < c.Retention {
		fail("KEY_RETENTION=%s is below RETENTION=%s: a pruned event's keys would expire before its row would have; want at least RETENTION, or 0 to keep them for ever", c.KeyRetention, c.Retention)
	}
	switch c.ClaimMode {
	case ClaimEnforce, ClaimLogOnly:
	default:
		fail("CLAIM_MODE=%q: want enforce or log-only", c.ClaimMode)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		fail("LOG_FORMAT=%q: want json or console", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		fail("LOG_LEVEL=%q: want debug, info, warn or error", c.LogLevel)
	}
	if c.ReconcileInterval > 0 && c.StripeAPIKey == "" {
		fail("RECONCILE_INTERVAL is set but STRIPE_API_KEY is not: reconciliation reads Stripe's events API")
	}
	if c.DriftInterval > 0 && c.StripeAPIKey == "" {
		fail("DRIFT_INTERVAL is set but STRIPE_API_KEY is not: the drift check reads Stripe's subscriptions and payment intents")
	}
	for _, pe := range providerEnv {
		secrets, problems := secretsFrom(varName(getenv, pe.env), splitSecrets(string(secret(pe.env))))
		if pe.provider == "standard" {
			// v1a (ed25519) public keys verify beside the v1 secrets and
			// are numbered after them. Every entry of the public-key
			// variable must be a whpk_ key: what a key is follows from
			// the variable it is in.
			const pubEnv = "STANDARD_WEBHOOK_PUBLIC_KEY"
			pubs, bad := publicKeysFrom(varName(getenv, pubEnv), splitSecrets(string(secret(pubEnv))))
			problems = append(problems, bad...)
			problems = append(problems, secretsThatArePublicKeys(varName(getenv, pe.env), secrets, pubs)...)
			secrets = append(secrets, pubs...)
		}
		for _, p := range problems {
			errs = append(errs, errors.New(p))
		}
		if len(secrets) == 0 {
			continue // an empty secret disables the source; it never accepts everything
		}
		c.Sources = append(c.Sources, Source{
			Name:      pe.provider,
			Provider:  pe.provider,
			Namespace: pe.provider,
			Secrets:   secrets,
			Tolerance: -1, // the provider's own default
			BodyDedup: true,
			fromEnv:   true,
		})
	}
	if c.ConfigFile = getenv("HOOKLEDGER_CONFIG"); c.ConfigFile != "" {
		if err := c.loadFile(c.ConfigFile, getenv); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.checkSharedNamespaces()...)
	errs = append(errs, c.checkSigningKeys()...)
	errs = append(errs, c.checkDanger()...)
	c.warn()
	return c, errors.Join(errs...)
}

// ProviderNames lists the providers a source may name.
func ProviderNames() []string {
	names := make([]string, len(providerEnv))
	for i, pe := range providerEnv {
		names[i] = pe.provider
	}
	return names
}

// checkSharedNamespaces refuses two sources with different secrets in one
// namespace, unless the config file says so (share_namespace): either
// signer could claim the other's event ids first, and the other's genuine
// events would then be answered as duplicates.
func (c *Config) checkSharedNamespaces() []error {
	var errs []error
	for i, a := range c.Sources {
		for _, b := range c.Sources[:i] {
			if a.Namespace != b.Namespace || slices.Equal(a.Secrets, b.Secrets) || (a.ShareNamespace && b.ShareNamespace) {
				continue
			}
			if (a.ShareNamespace && b.fromEnv) || (b.ShareNamespace && a.fromEnv) {
				continue // an environment source cannot say so itself; the file source's word is enough
			}
			errs = append(errs, fmt.Errorf("sources %s and %s share namespace %q with different secrets, so each could claim the other's event ids: "+
				"give one its own namespace, or set share_namespace: true on the config-file source(s) if both are endpoints of one account", b.Name, a.Name, a.Namespace))
		}
	}
	return errs
}

// checkSigningKeys refuses a Standard Webhooks signing key (whsk_) on any
// source: a receiver verifies v1a signatures with the sender's public key
// (whpk_) and must never hold the key that makes them.
func (c *Config) checkSigningKeys() []error {
	var errs []error
	for _, s := range c.Sources {
		for i, sec := range s.Secrets {
			if strings.HasPrefix(sec.Reveal(), "whsk_") {
				errs = append(errs, fmt.Errorf("source %s: key %d is a Standard Webhooks signing key (whsk_): a receiver needs only the sender's public key (whpk_, STANDARD_WEBHOOK_PUBLIC_KEY or public_keys); remove the signing key from this host", s.Name, i))
			}
		}
	}
	return errs
}

// warn records choices that load but look wrong.
func (c *Config) warn() {
	for _, s := range c.Sources {
		if s.Provider != "stripe" {
			continue
		}
		for i, sec := range s.Secrets {
			if !strings.HasPrefix(sec.Reveal(), "whsec_") {
				c.Warnings = append(c.Warnings, fmt.Sprintf("source %s: Stripe secret %d does not start with whsec_: is it an API key or another provider's secret? Stripe signs with the endpoint's signing secret (whsec_...)", s.Name, i))
			}
		}
	}
}

// secretVar reads a secret from the variable name or, when that is unset,
// from the file named by name_FILE (Docker and Kubernetes secrets). Setting
// both is an error.
func secretVar(getenv func(string) string, name string) (string, error) {
	v, file := getenv(name), getenv(name+"_FILE")
	switch {
	case file == "":
		return v, nil
	case v != "":
		return "", fmt.Errorf("%s and %s_FILE are both set: keep one", name, name)
	}
	v, err := readSecretFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", name, err)
	}
	return v, nil
}

// readSecretFile reads a secret file, without its trailing newline.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// Source returns the configured source called name.
func (c *Config) Source(name string) (Source, bool) {
	for _, s := range c.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// ReplayTokenOf is the replay token that source s honours: its own, else
// REPLAY_TOKEN.
func (c *Config) ReplayTokenOf(s Source) Secret {
	if s.ReplayToken != "" {
		return s.ReplayToken
	}
	return c.ReplayToken
}

// isNetwork reports whether v is a CIDR or an address.
func isNetwork(v string) bool {
	if _, err := netip.ParsePrefix(v); err == nil {
		return true
	}
	_, err := netip.ParseAddr(v)
	return err == nil
}

// RequireDatabase reports a clear error when DATABASE_URL is missing.
func (c *Config) RequireDatabase() error {
	if c.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set: point it at PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/hookledger?sslmode=disable")
	}
	return nil
}

func splitSecrets(v string) []Secret {
	var out []Secret
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, Secret(s))
		}
	}
	return out
}

// ParseDuration takes a Go duration or plain seconds ("10s", "300").
func ParseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(n) || math.IsInf(n, 0) || math.Abs(n) > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("%q seconds is not a usable duration", v)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

func durationVar(getenv func(string) string, name string, def time.Duration, fail func(string, ...any)) time.Duration {
	v := getenv(name)
	if v == "" {
		return def
	}
	d, err := ParseDuration(v)
	if err != nil {
		fail("%s=%q: want a duration such as 2s or 720h", name, v)
		return def
	}
	return d
}

func intVar(getenv func(string) string, name string, def int, fail func(string, ...any)) int {
	v := getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		fail("%s=%q: want a positive whole number", name, v)
		return def
	}
	return n
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// DevSecret is the Stripe secret `task dev` uses when none is set.
const DevSecret = "whsec_hookledger_dev"

// LoadDev reads the configuration for local development: the environment
// first, then development defaults (console logs, the dev Stripe secret).
func LoadDev() (*Config, error) {
	dev := map[string]string{"LOG_FORMAT": "console"}
	c, err := FromEnv(func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return dev[k]
	})
	if err == nil && len(c.Sources) == 0 {
		c.Sources = []Source{{Name: "stripe", Provider: "stripe", Namespace: "stripe", Secrets: []Secret{DevSecret}, Tolerance: -1}}
	}
	return c, err
}

// RedactURL hides the password of a database URL.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparseable database url>"
	}
	return u.Redacted()
}
