package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// IDFallback derives event ids for a sender that puts none where its
// provider does (see provider.IDFallback): the last resort.
type IDFallback struct {
	Header     string   `yaml:"header" json:"header,omitempty"`
	JSONPath   string   `yaml:"json_path" json:"json_path,omitempty"`
	HashFields []string `yaml:"hash_fields" json:"hash_fields,omitempty"`
}

// fileSource is one source in the config file.
type fileSource struct {
	Name      string   `yaml:"name"`
	Provider  string   `yaml:"provider"`
	Namespace string   `yaml:"namespace"`
	Secrets   []string `yaml:"secrets"`
	// SecretsEnv names a variable holding the secrets (or, with _FILE
	// appended, a file holding them).
	SecretsEnv string `yaml:"secrets_env"`
	// SecretsFile is a file holding the secrets, comma-separated.
	SecretsFile string `yaml:"secrets_file"`
	// PublicKeys (Standard Webhooks) are the sender's ed25519 public keys
	// (whpk_...) for v1a signatures; PublicKeysEnv names a variable holding
	// them, comma-separated. They enable the source as a secret does.
	PublicKeys    []string    `yaml:"public_keys"`
	PublicKeysEnv string      `yaml:"public_keys_env"`
	Tolerance     string      `yaml:"tolerance"`
	ID            *IDFallback `yaml:"id"`
	// ReplayTokenEnv names the variable holding the source's own replay
	// token.
	ReplayTokenEnv string `yaml:"replay_token_env"`
	// ShareNamespace allows the source a namespace that a source with
	// other secrets uses too: each may then claim the other's event ids.
	ShareNamespace bool `yaml:"share_namespace"`
	// BodyDedup (GitHub, Shopify; default true) treats a delivery whose
	// signed body equals an earlier event's as a replay.
	BodyDedup *bool `yaml:"body_dedup"`
	// AllowIPs are the client networks accepted: CIDRs, addresses, or
	// stripe / github for the providers' published lists.
	AllowIPs []string `yaml:"allow_ips"`
}

// A FileKey is one key a config-file source may have, with what it does.
type FileKey struct{ Key, Doc string }

// FileKeys documents the keys of a config-file source, in the order of
// fileSource.
func FileKeys() []FileKey { return slices.Clone(fileKeys) }

var fileKeys = []FileKey{
	{"name", "Required. The source's URL is `POST /webhooks/<name>`: lowercase letters, digits, `-` and `_`, at most 63, unique among the sources (the environment's are named after their providers)."},
	{"provider", "Required: " + list(ProviderNames(), "or") + "."},
	{"namespace", "The dedup scope; default the provider's name, shared with the environment's source of that provider. " +
		"Another provider's name is refused. Two sources with different secrets share a namespace only with `share_namespace`."},
	{"secrets", "Secrets written in the file. They work, but prefer `secrets_env` or `secrets_file`; a blank entry is refused."},
	{"secrets_env", "A variable holding the secrets, comma-separated for rotation (any one matches); its `_FILE` form is honoured too."},
	{"secrets_file", "A file holding the secrets, comma-separated (a Docker or Kubernetes secret)."},
	{"public_keys", "The sender's public keys (`whpk_` and base64 of the 32-byte ed25519 key), for providers that sign asymmetrically (`v1a`); " +
		"they enable the source as a secret does, and are numbered after the secrets."},
	{"public_keys_env", "A variable holding public keys, comma-separated (its `_FILE` form too)."},
	{"tolerance", "The timestamp window: a Go duration or seconds, at least `1s`; `0` turns the check off; default the provider's (see Providers). " +
		"Over 1h starts with a warning: a captured delivery's signature stays valid that long."},
	{"id", "An id fallback for a sender that puts no event id where its provider does; used only when the provider's own id is missing. " +
		"The id is the first of `header`, `json_path` and `hash_fields` that gives one."},
	{"id.header", "A request header holding the id. No provider signs it, so an event whose id comes from it also claims its signed body: " +
		"a copy of one delivery under another id is answered `duplicate`, never claimed again."},
	{"id.json_path", "A dotted path to the id in the body (`event.client_msg_id`)."},
	{"id.hash_fields", "The last resort: the SHA-256 of these body fields. Choose fields that identify the event and never change between retries, " +
		"never the whole body, whose delivery metadata may change."},
	{"replay_token_env", "A variable holding this source's own `X-Replay-Token`, instead of `REPLAY_TOKEN` (honoured only on Stripe and Paddle sources)."},
	{"share_namespace", "`true` lets the source share its namespace with sources that have other secrets: two endpoints of one account. " +
		"Otherwise refused, since either signer could claim the other's event ids first. An environment source cannot say so itself: the file source's word is enough."},
	{"body_dedup", "For providers that sign only the body (default `true`): a delivery whose signed body equals an earlier event's under another id is a replay " +
		"and is answered `duplicate`. Turn it off only if the sender legitimately sends identical bodies as distinct events."},
	{"allow_ips", "The client networks accepted: CIDRs, addresses, or the names of the providers' published sender lists (see Providers). " +
		"A client outside gets `403` before its body is read, counted in `hookledger_allowlist_refusals_total`. The signature stays the defence; the list is an extra fence."},
}

type fileConfig struct {
	Sources []fileSource `yaml:"sources"`
}

var sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// loadFile adds the sources of the YAML file at path to c. Secrets come
// from the file or, better, from the variable named by secrets_env (or a
// file). Every source is validated, disabled ones too, and every problem
// is reported, each with its line.
func (c *Config) loadFile(path string, getenv func(string) string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file configures nothing
	}
	if errs := checkShape(doc.Content[0], fileConfig{}, ""); len(errs) > 0 {
		return fmt.Errorf("config file %s:\n  %s", path, strings.Join(errs, "\n  "))
	}
	var fc fileConfig
	if err := doc.Content[0].Decode(&fc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	items := sourceNodes(doc.Content[0])
	var errs []error
	for i, fs := range fc.Sources {
		line := 0
		if i < len(items) {
			line = items[i].Line
		}
		src, enabled, problems := c.fileSource(fs, getenv)
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("config file %s: line %d: sources[%d] (%s): %s", path, line, i, fs.Name, p))
		}
		switch {
		case len(problems) > 0:
		case enabled:
			c.Sources = append(c.Sources, src)
		default:
			// An empty secret disables the source; it never accepts everything.
			c.Disabled = append(c.Disabled, fs.Name)
		}
	}
	return errors.Join(errs...)
}

// fileSource validates one config-file source, whether or not it has a
// secret, and builds it; enabled is false when it has no secret.
func (c *Config) fileSource(fs fileSource, getenv func(string) string) (src Source, enabled bool, problems []string) {
	problems = c.checkSource(fs)
	tolerance, err := parseTolerance(fs.Tolerance)
	if err != nil {
		problems = append(problems, fmt.Sprintf("tolerance %q: %v", fs.Tolerance, err))
	}
	secrets, bad := fs.keys(getenv)
	problems = append(problems, bad...)
	var replayToken string
	if fs.ReplayTokenEnv != "" {
		if replayToken, _, err = readVar(getenv, fs.ReplayTokenEnv); err != nil {
			problems = append(problems, err.Error())
		}
	}
	src = Source{
		Name: fs.Name, Provider: fs.Provider, Namespace: cmp.Or(fs.Namespace, fs.Provider), Secrets: secrets, Tolerance: tolerance,
		IDFallback: fs.ID, ReplayToken: Secret(replayToken), ShareNamespace: fs.ShareNamespace, BodyDedup: true, AllowIPs: fs.AllowIPs,
	}
	if fs.BodyDedup != nil {
		src.BodyDedup = *fs.BodyDedup
	}
	return src, len(secrets) > 0, problems
}

// checkSource says what is wrong with a config-file source's name,
// provider and namespace, its id fallback, and the keys that apply to
// some providers only.
func (c *Config) checkSource(fs fileSource) (problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !sourceName.MatchString(fs.Name) {
		fail("name must be lowercase letters, digits, - or _ (at most 63)")
	}
	if _, dup := c.Source(fs.Name); dup || slices.Contains(c.Disabled, fs.Name) {
		fail("a source named %s is already configured", fs.Name)
	}
	names := ProviderNames()
	switch {
	case fs.Provider == "":
		fail("provider is required")
	case !slices.Contains(names, fs.Provider):
		fail("provider %q: want one of %s", fs.Provider, strings.Join(names, ", "))
	}
	switch {
	case fs.Namespace == "":
	case !sourceName.MatchString(fs.Namespace):
		fail("namespace %q: want lowercase letters, digits, - or _ (at most 63)", fs.Namespace)
	case fs.Namespace != fs.Provider && slices.Contains(names, fs.Namespace):
		fail("namespace %q is the %s provider's default namespace: this %s source would share its ledger", fs.Namespace, fs.Namespace, fs.Provider)
	}
	if fs.ID != nil && fs.ID.Header == "" && fs.ID.JSONPath == "" && len(fs.ID.HashFields) == 0 {
		fail("id needs header, json_path or hash_fields")
	}
	return append(problems, checkProviderKeys(fs)...)
}

// checkProviderKeys refuses the keys that the source's provider does not
// take: body_dedup (for providers that sign only the body), public keys,
// and allow_ips names of published lists.
func checkProviderKeys(fs fileSource) (problems []string) {
	facts := providers[fs.Provider]
	if fs.BodyDedup != nil && !facts.signsBodyOnly {
		problems = append(problems, fmt.Sprintf("body_dedup applies to %s sources only (the other providers sign their event ids)",
			list(providersWhere(func(p providerFacts) bool { return p.signsBodyOnly }), "and")))
	}
	if (len(fs.PublicKeys) > 0 || fs.PublicKeysEnv != "") && facts.publicKeyPrefix == "" {
		problems = append(problems, fmt.Sprintf("public_keys and public_keys_env apply to %s sources only (v1a signatures)",
			list(providersWhere(func(p providerFacts) bool { return p.publicKeyPrefix != "" }), "and")))
	}
	published := providersWhere(func(p providerFacts) bool { return p.publishedIPs })
	for j, e := range fs.AllowIPs {
		if !slices.Contains(published, e) && !isNetwork(e) {
			problems = append(problems, fmt.Sprintf("allow_ips[%d] %q: want a CIDR, an address, %s", j, e, list(published, "or")))
		}
	}
	return problems
}

// keys collects the source's secrets (secrets, secrets_file, secrets_env,
// in that order), then its public keys (public_keys, public_keys_env):
// public keys verify beside the secrets and are numbered after them. What
// a key is follows from the field it comes from: secrets are never public
// keys, and every public key is a whpk_ ed25519 key.
func (fs fileSource) keys(getenv func(string) string) (keys []Secret, problems []string) {
	var secrets, publicKeys []Secret
	add := func(to *[]Secret, keep func(string, []Secret) ([]Secret, []string), from string, given []Secret) {
		kept, bad := keep(from, given)
		problems = append(problems, bad...)
		*to = append(*to, kept...)
	}
	for j, s := range fs.Secrets {
		if strings.TrimSpace(s) == "" {
			problems = append(problems, fmt.Sprintf("secrets[%d] is blank", j))
			continue
		}
		add(&secrets, secretsFrom, fmt.Sprintf("secrets[%d]", j), []Secret{Secret(strings.TrimSpace(s))})
	}
	if fs.SecretsFile != "" {
		v, err := readSecretFile(fs.SecretsFile)
		if err != nil {
			problems = append(problems, "secrets_file: "+err.Error())
		}
		add(&secrets, secretsFrom, "secrets_file", splitSecrets(v))
	}
	if fs.SecretsEnv != "" {
		v, from, err := readVar(getenv, fs.SecretsEnv)
		if err != nil {
			problems = append(problems, err.Error())
		}
		add(&secrets, secretsFrom, "secrets_env "+from, splitSecrets(v))
	}
	for j, k := range fs.PublicKeys {
		add(&publicKeys, publicKeysFrom, fmt.Sprintf("public_keys[%d]", j), []Secret{Secret(strings.TrimSpace(k))})
	}
	if fs.PublicKeysEnv != "" {
		v, from, err := readVar(getenv, fs.PublicKeysEnv)
		if err != nil {
			problems = append(problems, err.Error())
		}
		add(&publicKeys, publicKeysFrom, "public_keys_env "+from, splitSecrets(v))
	}
	problems = append(problems, secretsThatArePublicKeys("secrets (secrets, secrets_file, secrets_env in that order)", secrets, publicKeys)...)
	return append(secrets, publicKeys...), problems
}

// parseTolerance reads a source's tolerance: empty is the provider's
// default (-1), "0" turns the check off, anything else must be at least a
// second, so that a typo such as 1e-12 cannot turn the check off unseen.
func parseTolerance(v string) (time.Duration, error) {
	if v == "" {
		return -1, nil
	}
	d, err := ParseDuration(v)
	switch {
	case err != nil:
		return 0, errors.New("want a duration such as 300s, or 0 to turn the check off")
	case d < 0:
		return 0, errors.New("want a positive duration, or 0 to turn the check off")
	case d == 0 && strings.Trim(v, "0.s") != "":
		return 0, errors.New("rounds to 0, which turns the check off: write 0 if that is meant")
	case d > 0 && d < time.Second:
		return 0, errors.New("below 1s: every genuine delivery would be refused")
	}
	return d, nil
}

// sourceNodes returns the YAML nodes of the file's sources, for their
// line numbers.
func sourceNodes(root *yaml.Node) []*yaml.Node {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "sources" && root.Content[i+1].Kind == yaml.SequenceNode {
			return root.Content[i+1].Content
		}
	}
	return nil
}
