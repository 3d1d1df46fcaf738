package config

import (
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
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !sourceName.MatchString(fs.Name) {
		fail("name must be lowercase letters, digits, - or _ (at most 63)")
	}
	if _, dup := c.Source(fs.Name); dup || slices.Contains(c.Disabled, fs.Name) {
		fail("a source named %s is already configured", fs.Name)
	}
	if fs.Provider == "" {
		fail("provider is required")
	} else if !slices.Contains(ProviderNames(), fs.Provider) {
		fail("provider %q: want one of %s", fs.Provider, strings.Join(ProviderNames(), ", "))
	}
	ns := fs.Namespace
	if ns == "" {
		ns = fs.Provider
	}
	switch {
	case fs.Namespace == "":
	case !sourceName.MatchString(fs.Namespace):
		fail("namespace %q: want lowercase letters, digits, - or _ (at most 63)", fs.Namespace)
	case fs.Namespace != fs.Provider && slices.Contains(ProviderNames(), fs.Namespace):
		fail("namespace %q is the %s provider's default namespace: this %s source would share its ledger", fs.Namespace, fs.Namespace, fs.Provider)
	}
	tolerance, err := parseTolerance(fs.Tolerance)
	if err != nil {
		fail("tolerance %q: %v", fs.Tolerance, err)
	}
	if fs.ID != nil && fs.ID.Header == "" && fs.ID.JSONPath == "" && len(fs.ID.HashFields) == 0 {
		fail("id needs header, json_path or hash_fields")
	}
	if fs.BodyDedup != nil && fs.Provider != "github" && fs.Provider != "shopify" {
		fail("body_dedup applies to github and shopify sources only (the other providers sign their event ids)")
	}
	// What a key is follows from the field it comes from: secrets are
	// never public keys, and every public key is a whpk_ ed25519 key.
	var secrets, publicKeys []Secret
	addSecrets := func(from string, given []Secret) {
		kept, bad := secretsFrom(from, given)
		problems = append(problems, bad...)
		secrets = append(secrets, kept...)
	}
	addPublicKeys := func(from string, given []Secret) {
		kept, bad := publicKeysFrom(from, given)
		problems = append(problems, bad...)
		publicKeys = append(publicKeys, kept...)
	}
	for j, s := range fs.Secrets {
		if strings.TrimSpace(s) == "" {
			fail("secrets[%d] is blank", j)
			continue
		}
		addSecrets(fmt.Sprintf("secrets[%d]", j), []Secret{Secret(strings.TrimSpace(s))})
	}
	if fs.SecretsFile != "" {
		v, err := readSecretFile(fs.SecretsFile)
		if err != nil {
			fail("secrets_file: %v", err)
		}
		addSecrets("secrets_file", splitSecrets(v))
	}
	if fs.SecretsEnv != "" {
		v, err := secretVar(getenv, fs.SecretsEnv)
		if err != nil {
			fail("%v", err)
		}
		addSecrets("secrets_env "+varName(getenv, fs.SecretsEnv), splitSecrets(v))
	}
	if (len(fs.PublicKeys) > 0 || fs.PublicKeysEnv != "") && fs.Provider != "standard" {
		fail("public_keys and public_keys_env apply to standard sources only (v1a signatures)")
	}
	for j, k := range fs.PublicKeys {
		addPublicKeys(fmt.Sprintf("public_keys[%d]", j), []Secret{Secret(strings.TrimSpace(k))})
	}
	if fs.PublicKeysEnv != "" {
		v, err := secretVar(getenv, fs.PublicKeysEnv)
		if err != nil {
			fail("%v", err)
		}
		addPublicKeys("public_keys_env "+varName(getenv, fs.PublicKeysEnv), splitSecrets(v))
	}
	problems = append(problems, secretsThatArePublicKeys("secrets (secrets, secrets_file, secrets_env in that order)", secrets, publicKeys)...)
	// Public keys verify beside the secrets and are numbered after them.
	secrets = append(secrets, publicKeys...)
	for j, e := range fs.AllowIPs {
		if e != "stripe" && e != "github" && !isNetwork(e) {
			fail("allow_ips[%d] %q: want a CIDR, an address, stripe or github", j, e)
		}
	}
	var replayToken string
	if fs.ReplayTokenEnv != "" {
		if replayToken, err = secretVar(getenv, fs.ReplayTokenEnv); err != nil {
			fail("%v", err)
		}
	}
	src = Source{
		Name: fs.Name, Provider: fs.Provider, Namespace: ns, Secrets: secrets, Tolerance: tolerance, IDFallback: fs.ID,
		ReplayToken: Secret(strings.TrimSpace(replayToken)), ShareNamespace: fs.ShareNamespace, BodyDedup: true,
		AllowIPs: fs.AllowIPs,
	}
	if fs.BodyDedup != nil {
		src.BodyDedup = *fs.BodyDedup
	}
	return src, len(secrets) > 0, problems
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
