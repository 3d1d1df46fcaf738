package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigRefusesTrustingEveryProxy: a trusted proxy network holding
// every address lets any client write its own address in X-Forwarded-For;
// start-up refuses it, whichever way it is spelled, and keeps real proxy
// networks.
func TestConfigRefusesTrustingEveryProxy(t *testing.T) {
	t.Parallel()
	for _, proxies := range []string{"0.0.0.0/0", "::/0", "10.0.0.0/8, 0.0.0.0/0", "::ffff:0.0.0.0/96", "1.2.3.4/0"} {
		_, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": proxies}))
		require.ErrorContains(t, err, "trusts every address as a proxy", proxies)
	}
	for _, proxies := range []string{"10.0.0.0/8", "127.0.0.1/32,::1/128", "192.0.2.1", "::ffff:10.0.0.0/104", "fd00::/8"} {
		c, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": proxies}))
		require.NoError(t, err, proxies)
		require.Empty(t, c.Warnings, proxies)
	}
}

// TestConfigWarnsAboutWeakSettings: short tokens and secrets, long
// tolerances and long claim and read timeouts start, each with a warning
// that names the setting and never its value; sound settings start
// without one.
func TestConfigWarnsAboutWeakSettings(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{
		"ADMIN_TOKEN":              "q7Z",
		"REPLAY_TOKEN":             "k9X",
		"METRICS_TOKEN":            "w4V",
		"STRIPE_WEBHOOK_SECRET":    "whsec_Q",
		"GITHUB_WEBHOOK_SECRET":    "Jx,a-long-enough-secret",
		"CLAIM_TIMEOUT":            "30s",
		"HTTP_READ_HEADER_TIMEOUT": "2m",
		"HTTP_READ_TIMEOUT":        "1h",
		"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: stripe-eu
    provider: stripe
    namespace: stripe-eu
    secrets_env: EU_SECRET
    tolerance: 2h
    replay_token_env: EU_REPLAY
`),
		"EU_SECRET": "whsec_eu_long_enough", "EU_REPLAY": "zY",
	}))
	require.NoError(t, err, "weak settings start")
	all := strings.Join(c.Warnings, "\n")
	for _, want := range []string{
		"ADMIN_TOKEN is shorter than 16 bytes",
		"REPLAY_TOKEN is shorter than 16 bytes",
		"METRICS_TOKEN is shorter than 16 bytes",
		"source stripe-eu: its replay token is shorter than 16 bytes",
		"source stripe: secret 0 is shorter than 16 bytes",
		"source github: secret 0 is shorter than 16 bytes",
		"source stripe-eu: tolerance 2h0m0s is over 1h0m0s",
		"CLAIM_TIMEOUT=30s is over 10s",
		"HTTP_READ_HEADER_TIMEOUT=2m0s is over 1m0s",
		"HTTP_READ_TIMEOUT=1h0m0s is over 5m0s",
	} {
		require.Contains(t, all, want)
	}
	require.NotContains(t, all, "source github: secret 1", "a long secret beside a short one is fine")
	for _, value := range []string{"q7Z", "k9X", "w4V", "whsec_Q", "Jx", "zY", "a-long-enough-secret", "whsec_eu"} {
		require.NotContains(t, all, value, "no secret's value in a warning")
	}

	c, err = FromEnv(env(map[string]string{
		"ADMIN_TOKEN":           strings.Repeat("a", 16),
		"REPLAY_TOKEN":          strings.Repeat("r", 16),
		"METRICS_TOKEN":         strings.Repeat("m", 16),
		"STRIPE_WEBHOOK_SECRET": "whsec_abcdefghij",
		"CLAIM_TIMEOUT":         "10s",
		"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: stripe-eu
    provider: stripe
    namespace: stripe-eu
    secrets: [whsec_eu_long_enough]
    tolerance: 1h
  - name: partner
    provider: standard
    public_keys: [whpk_6/WfjCrmmUwoIE/o0BcxQdgpS3LjR98L7Nnx6v3ekFA=]
`),
	}))
	require.NoError(t, err)
	require.Empty(t, c.Warnings, "sound settings start quietly; a public key is not a secret")
}
