package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBodyLimitsValidated(t *testing.T) {
	t.Parallel()
	_, err := FromEnv(env(map[string]string{"MAX_BODY_BYTES": "1099511627776"}))
	require.ErrorContains(t, err, "MAX_BODY_BYTES=1099511627776 is over")
	_, err = FromEnv(env(map[string]string{"MAX_BODY_BYTES": "1048576", "MAX_INFLIGHT_BODY_BYTES": "1024"}))
	require.ErrorContains(t, err, "MAX_INFLIGHT_BODY_BYTES=1024 is below MAX_BODY_BYTES")
	c, err := FromEnv(env(map[string]string{"MAX_BODY_BYTES": "16777216"}))
	require.NoError(t, err)
	require.Equal(t, int64(8*16777216), c.InflightBodyBytes, "the budget holds at least eight bodies of the limit")
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestEveryPitfallReportedAtOnce: values that used to load silently are
// refused at start-up, disabled sources included, all in one error.
func TestEveryPitfallReportedAtOnce(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
sources:
  - name: blank
    provider: slack
    secrets: ["   "]
  - name: tiny
    provider: slack
    secrets: [s]
    tolerance: 1e-12
  - name: off-later
    provider: paddle
    secrets_env: NOT_SET_YET
    tolerance: forever
  - name: nul
    provider: github
    namespace: "gh\0x"
    secrets: [s]
  - name: poser
    provider: github
    namespace: stripe
    secrets: [s]
  - name: half
    provider: slack
    secrets: [s]
    tolerance: 500ms
  - name: nope
    provider: twilio
    secrets: [s]
`)
	_, err := FromEnv(env(map[string]string{
		"HOOKLEDGER_CONFIG": path, "HTTP_READ_TIMEOUT": "0", "HTTP_READ_HEADER_TIMEOUT": "-5s",
	}))
	require.Error(t, err)
	for _, want := range []string{
		"HTTP_READ_TIMEOUT=0s: want a positive duration",
		"HTTP_READ_HEADER_TIMEOUT=-5s: want a positive duration",
		"line 3: sources[0] (blank): secrets[0] is blank",
		`line 6: sources[1] (tiny): tolerance "1e-12": rounds to 0`,
		`line 10: sources[2] (off-later): tolerance "forever"`,
		`sources[3] (nul): namespace "gh\x00x"`,
		`sources[4] (poser): namespace "stripe" is the stripe provider's default namespace`,
		`sources[5] (half): tolerance "500ms": below 1s`,
		`sources[6] (nope): provider "twilio"`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

// TestYAMLErrorsNameTheKey: a value of the wrong shape is reported at its
// line with the key's path, not with a Go type name.
func TestYAMLErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
sources:
  - name: a
    provider: stripe
    secrets: whsec_not_a_list
  - name: b
    provider: github
    id: [x]
    share_namespace: maybe
`)
	_, err := FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": path}))
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `line 5: sources[0].secrets: want a list of strings, got "whsec_not_a_list"`)
	require.Contains(t, msg, "line 8: sources[1].id: want a mapping, got a list")
	require.Contains(t, msg, `line 9: sources[1].share_namespace: want true or false, got "maybe"`)
	require.NotContains(t, msg, "!!")
	require.NotContains(t, msg, "[]string")
}

// TestSharedNamespaceNeedsConsent: a second signer in a namespace could
// pre-claim the first one's ids; it takes share_namespace: true.
func TestSharedNamespaceNeedsConsent(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"SLACK_SIGNING_SECRET": "main", "HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: legacy-slack
    provider: slack
    secrets: [legacy]
`)}
	_, err := FromEnv(env(vars))
	require.ErrorContains(t, err, `sources slack and legacy-slack share namespace "slack" with different secrets`)

	vars["HOOKLEDGER_CONFIG"] = writeFile(t, `
sources:
  - name: legacy-slack
    provider: slack
    secrets: [legacy]
    share_namespace: true
`)
	_, err = FromEnv(env(vars))
	require.NoError(t, err)

	vars["HOOKLEDGER_CONFIG"] = writeFile(t, `
sources:
  - name: legacy-slack
    provider: slack
    secrets: [main]
`)
	_, err = FromEnv(env(vars))
	require.NoError(t, err, "the same secret is the same signer")
}

func TestSecretsFromFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(v), 0o600))
		return p
	}
	c, err := FromEnv(env(map[string]string{
		"STRIPE_WEBHOOK_SECRET_FILE": file("stripe", "whsec_a,whsec_b\n"),
		"ADMIN_TOKEN_FILE":           file("admin", "admintoken\n"),
		"DATABASE_URL_FILE":          file("db", "postgres://u:p@h/db\n"),
		"REPLAY_TOKEN_FILE":          file("replay", "rt"),
		"STRIPE_API_KEY_FILE":        file("key", "sk_test"),
		"METRICS_TOKEN_FILE":         file("metrics", "mt"),
		"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: gh-org
    provider: github
    namespace: gh-org
    secrets_env: GH_ORG_SECRET
  - name: shop
    provider: shopify
    secrets_file: `+file("shop", "shpss_1\n")+`
`),
		"GH_ORG_SECRET_FILE": file("gh", "org secret\n"),
	}))
	require.NoError(t, err)
	s, _ := c.Source("stripe")
	require.Equal(t, []Secret{"whsec_a", "whsec_b"}, s.Secrets)
	require.Equal(t, "admintoken", c.AdminToken.Reveal())
	require.Equal(t, "postgres://u:p@h/db", c.DatabaseURL.Reveal())
	require.Equal(t, "rt", c.ReplayToken.Reveal())
	require.Equal(t, "sk_test", c.StripeAPIKey.Reveal())
	require.Equal(t, "mt", c.MetricsToken.Reveal())
	gh, _ := c.Source("gh-org")
	require.Equal(t, []Secret{"org secret"}, gh.Secrets)
	shop, _ := c.Source("shop")
	require.Equal(t, []Secret{"shpss_1"}, shop.Secrets)

	_, err = FromEnv(env(map[string]string{"ADMIN_TOKEN": "a", "ADMIN_TOKEN_FILE": file("a", "a")}))
	require.ErrorContains(t, err, "ADMIN_TOKEN and ADMIN_TOKEN_FILE are both set")
	_, err = FromEnv(env(map[string]string{"ADMIN_TOKEN_FILE": filepath.Join(dir, "missing")}))
	require.ErrorContains(t, err, "ADMIN_TOKEN_FILE")
}

func TestStripeSecretWithoutPrefixWarns(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_ok_long_enough,sk_live_oops_long_enough"}))
	require.NoError(t, err)
	require.Len(t, c.Warnings, 1)
	require.Contains(t, c.Warnings[0], "Stripe secret 1 does not start with whsec_")
}

// TestExampleFileIsCompleteAndValid: the shipped example loads, and it
// shows every key a source may have.
func TestExampleFileIsCompleteAndValid(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("hookledger.example.yaml")
	require.NoError(t, err)
	secretFile := filepath.Join(t.TempDir(), "stripe_connect_webhook_secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("whsec_connect_long_enough\n"), 0o600))
	c, err := FromEnv(env(map[string]string{
		"HOOKLEDGER_CONFIG":           writeFile(t, strings.ReplaceAll(string(raw), "/run/secrets/stripe_connect_webhook_secret", secretFile)),
		"STRIPE_WEBHOOK_SECRET":       "whsec_main_long_enough",
		"STRIPE_EU_WEBHOOK_SECRET":    "whsec_eu_long_enough",
		"GITHUB_ORG_WEBHOOK_SECRET":   "org-webhook-secret",
		"SLACK_LEGACY_SIGNING_SECRET": "legacy-signing-secret",
	}))
	require.NoError(t, err)
	require.Len(t, c.Sources, 6)
	require.Empty(t, c.Disabled)
	require.Empty(t, c.Warnings)
	for _, key := range knownKeys(reflect.TypeOf(fileSource{})) {
		require.Regexp(t, `(?m)^\s+(- )?`+key+`:`, string(raw), "the example shows %s", key)
	}
}

func knownKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		keys = append(keys, name)
		if ft := t.Field(i).Type; ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			keys = append(keys, knownKeys(ft.Elem())...)
		}
	}
	return keys
}
