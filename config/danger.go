package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Thresholds of checkDanger.
const (
	// MinTokenBytes is the shortest admin, replay or metrics token that
	// starts without a warning (openssl rand -hex 32 gives 64).
	MinTokenBytes = 16
	// MinSecretBytes is the shortest provider secret that starts without a
	// warning: every provider generates longer ones, and GitHub's, which
	// people type (summer2024), is guessed from anything computed from it
	// alone.
	MinSecretBytes = 16
	// MaxQuietTolerance is the longest timestamp tolerance that starts
	// without a warning.
	MaxQuietTolerance = time.Hour
	// MaxQuietClaimTimeout is the longest CLAIM_TIMEOUT that starts
	// without a warning.
	MaxQuietClaimTimeout = 10 * time.Second
	// MaxQuietReadHeaderTimeout and MaxQuietReadTimeout are the longest
	// HTTP_READ_HEADER_TIMEOUT and HTTP_READ_TIMEOUT that start without a
	// warning.
	MaxQuietReadHeaderTimeout = time.Minute
	MaxQuietReadTimeout       = 5 * time.Minute
)

// checkDanger refuses the settings that switch a defence off for everyone
// and warns (c.Warnings) about the ones that weaken it. Refused: a trusted
// proxy network that holds every address (0.0.0.0/0, ::/0), which lets any
// client write its own address in X-Forwarded-For and so walk past
// allow_ips and the admin throttle. Warned: tokens shorter than
// MinTokenBytes, provider secrets shorter than MinSecretBytes, tolerances
// over MaxQuietTolerance (a captured delivery's signature stays valid that
// long), and claim and read timeouts long enough for a few slow
// clients to hold the server's connections. Messages name the setting,
// never a secret's value.
func (c *Config) checkDanger() []error {
	var errs []error
	for _, p := range c.TrustedProxies {
		if holdsEveryAddress(p) {
			errs = append(errs, fmt.Errorf("TRUSTED_PROXIES: %s trusts every address as a proxy, so any client sets its own address with X-Forwarded-For "+
				"(allow_ips, the admin throttle and the logs would believe it): list only your proxies' addresses", p))
		}
	}
	warn := func(format string, args ...any) { c.Warnings = append(c.Warnings, fmt.Sprintf(format, args...)) }
	for _, t := range []struct {
		name  string
		token Secret
	}{{"ADMIN_TOKEN", c.AdminToken}, {"REPLAY_TOKEN", c.ReplayToken}, {"METRICS_TOKEN", c.MetricsToken}} {
		if t.token != "" && len(t.token) < MinTokenBytes {
			warn("%s is shorter than %d bytes: a short token can be guessed; use a long random one (openssl rand -hex 32)", t.name, MinTokenBytes)
		}
	}
	for _, s := range c.Sources {
		if s.ReplayToken != "" && len(s.ReplayToken) < MinTokenBytes {
			warn("source %s: its replay token is shorter than %d bytes: a short token can be guessed; use a long random one (openssl rand -hex 32)", s.Name, MinTokenBytes)
		}
		for i, sec := range s.Secrets {
			if strings.HasPrefix(sec.Reveal(), "whpk_") {
				continue // a public key: nothing to guess
			}
			if len(sec) < MinSecretBytes {
				warn("source %s: secret %d is shorter than %d bytes: anyone who guesses it signs events; use the secret the provider generated, or a long random one (openssl rand -hex 32)", s.Name, i, MinSecretBytes)
			}
		}
		if s.Tolerance > MaxQuietTolerance {
			warn("source %s: tolerance %s is over %s: a captured delivery's signature stays valid that long, so the ledger's claim is its only replay defence, and that lasts only until KEY_RETENTION expires the pruned row's keys", s.Name, s.Tolerance, MaxQuietTolerance)
		}
	}
	if c.ClaimTimeout > MaxQuietClaimTimeout {
		warn("CLAIM_TIMEOUT=%s is over %s: providers stop waiting sooner (GitHub after 10s), and meanwhile a slow database holds every waiting delivery's connection and body", c.ClaimTimeout, MaxQuietClaimTimeout)
	}
	if c.ReadHeaderTimeout > MaxQuietReadHeaderTimeout {
		warn("HTTP_READ_HEADER_TIMEOUT=%s is over %s: a client that trickles headers holds a connection that long", c.ReadHeaderTimeout, MaxQuietReadHeaderTimeout)
	}
	if c.ReadTimeout > MaxQuietReadTimeout {
		warn("HTTP_READ_TIMEOUT=%s is over %s: a client that trickles its body holds a connection and its share of the body budget that long", c.ReadTimeout, MaxQuietReadTimeout)
	}
	return errs
}

// holdsEveryAddress reports whether network p holds every IPv4 or every
// IPv6 address: a /0, or ::ffff:0.0.0.0/96, which a proxy check that
// unmaps IPv4-mapped addresses reads as 0.0.0.0/0.
func holdsEveryAddress(p string) bool {
	prefix, err := netip.ParsePrefix(p)
	if err != nil {
		return false
	}
	bits := prefix.Bits()
	if prefix.Masked().Addr().Is4In6() && bits >= 96 {
		bits -= 96
	}
	return bits == 0
}
