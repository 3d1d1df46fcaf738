package config

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, ":8080", c.HTTPAddr)
	require.Equal(t, int64(1048576), c.MaxBodyBytes)
	require.Equal(t, 2*time.Second, c.ClaimTimeout)
	require.Equal(t, ClaimEnforce, c.ClaimMode)
	require.Equal(t, 2160*time.Hour, c.Retention)
	require.Equal(t, 50*time.Millisecond, c.ApplyLinger)
	require.Empty(t, c.Sources, "no secret, no source")
}

func TestApplyLinger(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"0": 0, "0.2": 200 * time.Millisecond, "1s": time.Second} {
		c, err := FromEnv(env(map[string]string{"APPLY_LINGER": v}))
		require.NoError(t, err, v)
		require.Equal(t, want, c.ApplyLinger, v)
	}
	for _, v := range []string{"-1ms", "2s", "soon"} {
		_, err := FromEnv(env(map[string]string{"APPLY_LINGER": v}))
		require.ErrorContains(t, err, "APPLY_LINGER", v)
	}
}

func TestSourcesFromSecrets(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "300": 300 * time.Second, "0": 0} {
		d, err := ParseDuration(in)
		require.NoError(t, err)
		require.Equal(t, want, d)
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: stripe-eu
    provider: stripe
    secrets_env: STRIPE_EU_SECRET
    share_namespace: true
    tolerance: 120s
  - name: stripe-us
    provider: stripe
    namespace: stripe-us
    secrets: [whsec_us1, whsec_us2]
  - name: billing
    provider: standard
    secrets_env: BILLING_SECRET
    id:
      hash_fields: [type, data.customer_id, data.seq]
  - name: empty
    provider: github
    secrets_env: NOT_SET
`), 0o600))
	c, err := FromEnv(env(map[string]string{
		"HOOKLEDGER_CONFIG":     path,
		"STRIPE_WEBHOOK_SECRET": "whsec_env",
		"STRIPE_EU_SECRET":      "whsec_eu",
		"BILLING_SECRET":        "whsec_c2VjcmV0",
	}))
	require.NoError(t, err)
	names := []string{}
	for _, s := range c.Sources {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"stripe", "stripe-eu", "stripe-us", "billing"}, names)
	eu, _ := c.Source("stripe-eu")
	require.Equal(t, "stripe", eu.Namespace, "two endpoints of one account share one ledger namespace")
	require.Equal(t, 120*time.Second, eu.Tolerance)
	us, _ := c.Source("stripe-us")
	require.Equal(t, "stripe-us", us.Namespace)
	require.Len(t, us.Secrets, 2)
	require.Equal(t, time.Duration(-1), us.Tolerance)
	billing, _ := c.Source("billing")
	require.Equal(t, []string{"type", "data.customer_id", "data.seq"}, billing.IDFallback.HashFields)
	require.Equal(t, []string{"empty"}, c.Disabled, "no secret disables the source")
}

func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: Bad Name
    provider: stripe
    secrets: [x]
  - name: stripe
    provider: stripe
    secrets: [x]
  - name: slow
    provider: slack
    secrets: [x]
    tolerance: forever
  - name: typo
    provider: slack
    secret: [x]
`), 0o600))
	_, err := FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": path, "STRIPE_WEBHOOK_SECRET": "whsec_env"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), `line 15: sources[3]: unknown key "secret"`)
	path2 := filepath.Join(t.TempDir(), "bad2.yaml")
	require.NoError(t, os.WriteFile(path2, []byte(`
sources:
  - name: Bad Name
    provider: stripe
    secrets: [x]
  - name: stripe
    provider: stripe
    secrets: [x]
  - name: slow
    provider: slack
    secrets: [x]
    tolerance: forever
`), 0o600))
	_, err = FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": path2, "STRIPE_WEBHOOK_SECRET": "whsec_env"}))
	require.Error(t, err)
	for _, want := range []string{"name must be lowercase", "already configured", `tolerance "forever"`} {
		require.Contains(t, err.Error(), want)
	}
}

// TestKeyRetention: kept keys last 400 days by default, for ever with 0,
// and never less than the rows they stand for.
func TestKeyRetention(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, 9600*time.Hour, c.KeyRetention)
	c, err = FromEnv(env(map[string]string{"KEY_RETENTION": "0"}))
	require.NoError(t, err)
	require.Zero(t, c.KeyRetention)
	_, err = FromEnv(env(map[string]string{"KEY_RETENTION": "1000h"}))
	require.ErrorContains(t, err, "KEY_RETENTION=1000h0m0s is below RETENTION=2160h0m0s")
}

// TestPayloadKeysValidated: keys are base64 of 32 bytes; a bad one is
// named by position, never printed.
func TestPayloadKeysValidated(t *testing.T) {
	t.Parallel()
	good := base64.StdEncoding.EncodeToString(make([]byte, 32))
	other := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	c, err := FromEnv(env(map[string]string{"PAYLOAD_KEYS": good + ", " + other}))
	require.NoError(t, err)
	require.Len(t, c.PayloadKeys, 2)
	_, err = FromEnv(env(map[string]string{"PAYLOAD_KEYS": good + ",c2hvcnQ="}))
	require.ErrorContains(t, err, "PAYLOAD_KEYS: key 2 is not 32 bytes")
	require.NotContains(t, err.Error(), "c2hvcnQ=")
}
