package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, int64(1048576), c.MaxBodyBytes)
	require.Equal(t, 2*time.Second, c.ClaimTimeout)
	require.Equal(t, ClaimEnforce, c.ClaimMode)
	require.Equal(t, 2160*time.Hour, c.Retention)
	require.Empty(t, c.Sources, "no secret, no source")
}

func TestSourcesFromSecrets(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_a, whsec_b",
		"GITHUB_WEBHOOK_SECRET": " ",
	}))
	require.NoError(t, err)
	require.Len(t, c.Sources, 1, "a blank secret disables the source")
	s, ok := c.Source("stripe")
	require.True(t, ok)
	require.Equal(t, []Secret{"whsec_a", "whsec_b"}, s.Secrets)
	require.Equal(t, "stripe", s.Namespace)
}

func TestValidationReportsEveryProblem(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"MAX_BODY_BYTES": "-1",
		"CLAIM_TIMEOUT":  "soon",
		"CLAIM_MODE":     "maybe",
		"RETENTION":      "24h",
		"LOG_FORMAT":     "xml",
	}))
	require.Error(t, err)
	for _, want := range []string{"MAX_BODY_BYTES", "CLAIM_TIMEOUT", "CLAIM_MODE", "RETENTION=24h0m0s is below 720h", "LOG_FORMAT"} {
		require.Contains(t, err.Error(), want)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"DATABASE_URL":          "postgres://u:dbpass@h/db",
		"STRIPE_WEBHOOK_SECRET": "whsec_topsecret",
		"ADMIN_TOKEN":           "admintoken",
		"REPLAY_TOKEN":          "replaytoken",
		"STRIPE_API_KEY":        "sk_live_key",
	}))
	require.NoError(t, err)
	js, err := json.Marshal(c)
	require.NoError(t, err)
	for _, out := range []string{string(js), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c)} {
		for _, secret := range []string{"dbpass", "whsec_topsecret", "admintoken", "replaytoken", "sk_live_key"} {
			require.False(t, strings.Contains(out, secret), "%q leaked in %s", secret, out)
		}
	}
	require.Equal(t, "whsec_topsecret", c.Sources[0].Secrets[0].Reveal())
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "300": 300 * time.Second, "0": 0} {
		d, err := ParseDuration(in)
		require.NoError(t, err)
		require.Equal(t, want, d)
	}
}
