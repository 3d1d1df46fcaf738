// Package config loads hookledger's configuration from the environment,
// validates it once at start-up and prints it with every secret redacted.
// Nothing else in hookledger reads the environment.
package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
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
	// MinRetention is Stripe's replay window, the 30 days of events its
	// API lists. A pruned event stays a duplicate by its kept keys
	// (KEY_RETENTION); the floor keeps its stored body while Stripe can
	// still redeliver or replay it, to compare a duplicate with and to
	// show or requeue it from.
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
	// SweepInterval is how often the leader sweeps the ledger for claimed
	// events with no live apply job (LEDGER_SWEEP_INTERVAL).
	SweepInterval time.Duration `json:"ledger_sweep_interval"`
	// AlertWebhookURL, when set, turns on alerts: the leader checks the
	// rules every AlertCheckInterval and POSTs each change of state.
	AlertWebhookURL    Secret        `json:"alert_webhook_url"`
	AlertWebhookSecret Secret        `json:"alert_webhook_secret"`
	AlertCheckInterval time.Duration `json:"alert_check_interval"`
	// AlertOldestPending is the age of the oldest pending event above
	// which backlog_oldest_pending fires.
	AlertOldestPending time.Duration `json:"alert_oldest_pending"`
	// AlertFailedAge is how long an event is failed for before
	// failed_events fires.
	AlertFailedAge time.Duration `json:"alert_failed_age"`
	// AlertSignatureFailures is the refused signatures of one source in
	// five minutes at which signature_failures fires.
	AlertSignatureFailures int `json:"alert_signature_failures"`
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
	// CPUProfile (HOOKLEDGER_CPUPROFILE), when set, is where serve writes
	// its CPU and allocation profiles.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// GOGC is the Go runtime's variable, which serve's own collector
	// target gives way to when set.
	GOGC string `json:"gogc,omitempty"`
}

// Load reads the configuration from the process environment.
func Load() (*Config, error) { return FromEnv(os.Getenv) }

// FromEnv reads the configuration through getenv and validates it: each
// option of the table (Options), then what several options decide
// together, then the sources, the environment's and the config file's.
// Every problem is reported, not only the first.
func FromEnv(getenv func(string) string) (*Config, error) {
	c := &Config{}
	l := &loader{getenv: getenv, settings: make(map[string]setting, len(options))}
	for i := range options {
		l.load(c, &options[i])
	}
	c.checkOptions(l)
	c.envSources(l)
	if c.ConfigFile != "" {
		l.add(c.loadFile(c.ConfigFile, getenv))
	}
	l.errs = append(l.errs, c.checkSharedNamespaces()...)
	l.errs = append(l.errs, c.checkSigningKeys()...)
	l.errs = append(l.errs, c.checkDanger()...)
	c.warn()
	return c, errors.Join(l.errs...)
}

// loader is one reading of the environment.
type loader struct {
	getenv func(string) string
	// settings holds every option's value by name, for the checks that
	// read several.
	settings map[string]setting
	errs     []error
}

// setting is one option as read.
type setting struct {
	value string // the variable's value, else the option's default
	from  string // where it was read: the variable, or NAME_FILE
	given bool   // the environment set it
}

// load reads option o and sets its field: the default first, then the
// environment's value, so that a value that does not parse leaves the
// default. An empty variable is unset.
func (l *loader) load(c *Config, o *Option) {
	s := setting{value: o.Default, from: o.Name}
	v := l.getenv(o.Name)
	if o.Secret {
		var err error
		v, s.from, err = readVar(l.getenv, o.Name)
		l.add(err)
	}
	if v != "" {
		s.value, s.given = v, true
	}
	l.settings[o.Name] = s
	if o.set == nil {
		return
	}
	l.add(o.set(c, o.Name, o.Default))
	if s.given {
		l.add(o.set(c, o.Name, s.value))
	}
}

// value is option name's value, else its default.
func (l *loader) value(name string) string { return l.settings[name].value }

func (l *loader) add(err error) {
	if err != nil {
		l.errs = append(l.errs, err)
	}
}

func (l *loader) fail(format string, args ...any) { l.add(fmt.Errorf(format, args...)) }

// readVar reads secret variable name as secretVar does, trimmed, and says
// where it came from (varName).
func readVar(getenv func(string) string, name string) (v, from string, err error) {
	v, err = secretVar(getenv, name)
	return strings.TrimSpace(v), varName(getenv, name), err
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

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// DevSecret is the Stripe secret `task dev` uses when none is set. It is
// public: `hookledger serve` refuses a source holding it.
const DevSecret = "whsec_hookledger_dev"

// DevHTTPAddr is where `task dev` listens when HTTP_ADDR is unset: the
// loopback interface only, since its Stripe secret (DevSecret) is public
// and anyone who reaches the port could sign events.
const DevHTTPAddr = "127.0.0.1:8080"

// LoadDev reads the configuration for local development: the environment
// first, then development defaults (console logs, DevHTTPAddr, the dev
// Stripe secret).
func LoadDev() (*Config, error) {
	dev := map[string]string{"LOG_FORMAT": "console", "HTTP_ADDR": DevHTTPAddr}
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
