package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
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
	Name       string      `yaml:"name"`
	Provider   string      `yaml:"provider"`
	Namespace  string      `yaml:"namespace"`
	Secrets    []string    `yaml:"secrets"`
	SecretsEnv string      `yaml:"secrets_env"`
	Tolerance  string      `yaml:"tolerance"`
	ID         *IDFallback `yaml:"id"`
	// ReplayTokenEnv names the variable holding the source's own replay
	// token.
	ReplayTokenEnv string `yaml:"replay_token_env"`
}

type fileConfig struct {
	Sources []fileSource `yaml:"sources"`
}

var sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// loadFile adds the sources of the YAML file at path to c. Secrets come
// from the file or, better, from the variable named by secrets_env.
func (c *Config) loadFile(path string, getenv func(string) string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var errs []error
	for i, fs := range fc.Sources {
		where := fmt.Sprintf("config file %s: sources[%d] (%s)", path, i, fs.Name)
		if !sourceName.MatchString(fs.Name) {
			errs = append(errs, fmt.Errorf("%s: name must be lowercase letters, digits, - or _", where))
			continue
		}
		if fs.Provider == "" {
			errs = append(errs, fmt.Errorf("%s: provider is required", where))
			continue
		}
		if _, dup := c.Source(fs.Name); dup {
			errs = append(errs, fmt.Errorf("%s: a source named %s is already configured", where, fs.Name))
			continue
		}
		var secrets []Secret
		for _, s := range fs.Secrets {
			if s != "" {
				secrets = append(secrets, Secret(s))
			}
		}
		if fs.SecretsEnv != "" {
			secrets = append(secrets, splitSecrets(getenv(fs.SecretsEnv))...)
		}
		if len(secrets) == 0 {
			// An empty secret disables the source; it never accepts everything.
			c.Disabled = append(c.Disabled, fs.Name)
			continue
		}
		tolerance := time.Duration(-1)
		if fs.Tolerance != "" {
			if tolerance, err = ParseDuration(fs.Tolerance); err != nil || tolerance < 0 {
				errs = append(errs, fmt.Errorf("%s: tolerance %q: want a duration such as 300s, or 0 to turn the check off", where, fs.Tolerance))
				continue
			}
		}
		ns := fs.Namespace
		if ns == "" {
			ns = fs.Provider
		}
		if fs.ID != nil && fs.ID.Header == "" && fs.ID.JSONPath == "" && len(fs.ID.HashFields) == 0 {
			errs = append(errs, fmt.Errorf("%s: id needs header, json_path or hash_fields", where))
			continue
		}
		c.Sources = append(c.Sources, Source{
			Name: fs.Name, Provider: fs.Provider, Namespace: ns, Secrets: secrets, Tolerance: tolerance, IDFallback: fs.ID,
			ReplayToken: Secret(strings.TrimSpace(getenv(fs.ReplayTokenEnv))),
		})
	}
	return errors.Join(errs...)
}
