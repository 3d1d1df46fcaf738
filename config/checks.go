package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// checkOptions checks what no option decides alone, and derives what
// follows from several.
func (c *Config) checkOptions(l *loader) {
	if c.ReconcileInterval < 0 || c.ReconcileWindow <= 0 {
		l.fail("RECONCILE_INTERVAL=%s, RECONCILE_WINDOW=%s: want an interval of 0 (off) or more and a positive window", c.ReconcileInterval, c.ReconcileWindow)
	}
	if c.KeyRetention != 0 && c.KeyRetention < c.Retention {
		l.fail("KEY_RETENTION=%s is below RETENTION=%s: a pruned event's keys would expire before its row would have; want at least RETENTION, or 0 to keep them for ever", c.KeyRetention, c.Retention)
	}
	if c.ReconcileInterval > 0 && c.StripeAPIKey == "" {
		l.fail("RECONCILE_INTERVAL is set but STRIPE_API_KEY is not: reconciliation reads Stripe's events API")
	}
	if c.DriftInterval > 0 && c.StripeAPIKey == "" {
		l.fail("DRIFT_INTERVAL is set but STRIPE_API_KEY is not: the drift check reads Stripe's subscriptions and payment intents")
	}
	c.checkDeploy(l)
	if c.RedisURL != "" && c.ClaimMode == ClaimLogOnly {
		c.Warnings = append(c.Warnings, "REDIS_URL is set but CLAIM_MODE=log-only applies every delivery again: the Redis short-circuit is off")
	}
}

// envSources enables a source for each provider whose variable holds a
// secret (or, for a provider that verifies with public keys, a key): POST
// /webhooks/<provider>, in the provider's namespace.
func (c *Config) envSources(l *loader) {
	for _, o := range options {
		if o.Provider == "" || o.PublicKeys {
			continue
		}
		set := l.settings[o.Name]
		secrets, problems := secretsFrom(set.from, splitSecrets(set.value))
		if pub, ok := publicKeyOption(o.Provider); ok {
			// Public keys verify beside the secrets and are numbered after
			// them. Every entry of the public-key variable must be a
			// public key: what a key is follows from the variable it is in.
			keys := l.settings[pub.Name]
			pubs, bad := publicKeysFrom(keys.from, splitSecrets(keys.value))
			problems = append(problems, bad...)
			problems = append(problems, secretsThatArePublicKeys(set.from, secrets, pubs)...)
			secrets = append(secrets, pubs...)
		}
		for _, p := range problems {
			l.add(errors.New(p))
		}
		if len(secrets) == 0 {
			continue // an empty secret disables the source; it never accepts everything
		}
		c.Sources = append(c.Sources, Source{
			Name:      o.Provider,
			Provider:  o.Provider,
			Namespace: o.Provider,
			Secrets:   secrets,
			Tolerance: -1, // the provider's own default
			BodyDedup: true,
			fromEnv:   true,
		})
	}
}

// publicKeyOption is the variable of provider's public keys, if it has one.
func publicKeyOption(provider string) (Option, bool) {
	for _, o := range options {
		if o.Provider == provider && o.PublicKeys {
			return o, true
		}
	}
	return Option{}, false
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
			if strings.HasPrefix(sec.Reveal(), standardSigningKeyPrefix) {
				errs = append(errs, fmt.Errorf("source %s: key %d is a Standard Webhooks signing key (whsk_): a receiver needs only the sender's public key (whpk_, STANDARD_WEBHOOK_PUBLIC_KEY or public_keys); remove the signing key from this host", s.Name, i))
			}
		}
	}
	return errs
}

// warn records choices that load but look wrong: a secret without the
// prefix its provider gives every signing secret.
func (c *Config) warn() {
	for _, s := range c.Sources {
		prefix := providers[s.Provider].secretPrefix
		if prefix == "" {
			continue
		}
		title := strings.ToUpper(s.Provider[:1]) + s.Provider[1:]
		for i, sec := range s.Secrets {
			if !strings.HasPrefix(sec.Reveal(), prefix) {
				c.Warnings = append(c.Warnings, fmt.Sprintf("source %s: %s secret %d does not start with %s: is it an API key or another provider's secret? %s signs with the endpoint's signing secret (%s...)",
					s.Name, title, i, prefix, title, prefix))
			}
		}
	}
}
