package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bareTestPublicKey is testPublicKey without its whpk_ prefix: as an HMAC
// secret, anyone who knows the public key could sign v1 events with it.
var bareTestPublicKey = strings.TrimPrefix(testPublicKey, "whpk_")

// TestPublicKeyVariablesTakeOnlyPublicKeys: every entry of
// STANDARD_WEBHOOK_PUBLIC_KEY (and its _FILE form), public_keys and
// public_keys_env must be a whpk_ ed25519 public key; anything else is
// refused at start-up with the variable named, and never kept as a key.
func TestPublicKeyVariablesTakeOnlyPublicKeys(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "standard_public_key")
	require.NoError(t, os.WriteFile(keyFile, []byte(bareTestPublicKey+"\n"), 0o600))
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bare key", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": bareTestPublicKey},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is not a Standard Webhooks public key: want whpk_ followed by the base64 of the 32-byte ed25519 public key (it looks like a bare public key"},
		{"bare key beside a v1 secret", map[string]string{"STANDARD_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "STANDARD_WEBHOOK_PUBLIC_KEY": bareTestPublicKey},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is not a Standard Webhooks public key"},
		{"bare key second in a rotation", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey + "," + bareTestPublicKey},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 1 (counting from 0) is not a Standard Webhooks public key"},
		{"bare key from a file", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY_FILE": keyFile},
			"STANDARD_WEBHOOK_PUBLIC_KEY_FILE: entry 0 (counting from 0) is not a Standard Webhooks public key"},
		{"v1 secret", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is a v1 secret (whsec_), not a public key"},
		{"signing key", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": "whsk_c2VjcmV0"},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is a Standard Webhooks signing key (whsk_)"},
		{"not base64", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": "whpk_not base64!"},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is a whpk_ public key that is not base64"},
		{"wrong length", map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": "whpk_c2Vjb25k"},
			"STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is a whpk_ public key of 6 bytes; an ed25519 public key is 32"},
		{"public_keys_env", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys_env: PARTNER_KEYS
`), "PARTNER_KEYS": testPublicKey + "," + bareTestPublicKey},
			"sources[0] (partner): public_keys_env PARTNER_KEYS: entry 1 (counting from 0) is not a Standard Webhooks public key"},
		{"public_keys_env from a file", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys_env: PARTNER_KEYS
`), "PARTNER_KEYS_FILE": keyFile},
			"sources[0] (partner): public_keys_env PARTNER_KEYS_FILE: entry 0 (counting from 0) is not a Standard Webhooks public key"},
		{"public_keys", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys: [`+testPublicKey+`, `+bareTestPublicKey+`, whpk_c2Vjb25k]
`)},
			"sources[0] (partner): public_keys[1] is not a Standard Webhooks public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env))
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), bareTestPublicKey, "the refused value is not printed")
			for _, s := range c.Sources {
				for _, sec := range s.Secrets {
					require.True(t, strings.HasPrefix(sec.Reveal(), "whpk_") || strings.HasPrefix(sec.Reveal(), "whsec_"), "a refused entry is never kept as a key")
				}
			}
		})
	}
	_, err := FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys: [`+testPublicKey+`, whpk_c2Vjb25k]
`)}))
	require.ErrorContains(t, err, "public_keys[1] is a whpk_ public key of 6 bytes")
}

// TestSecretVariablesTakeNoPublicKeys: a whpk_ value in a secret variable
// or field is refused (as an HMAC secret it would be a key everyone has),
// and so is a v1 secret that is the source's own public key.
func TestSecretVariablesTakeNoPublicKeys(t *testing.T) {
	t.Parallel()
	secretFile := filepath.Join(t.TempDir(), "secrets")
	require.NoError(t, os.WriteFile(secretFile, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,"+testPublicKey), 0o600))
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"standard secret", map[string]string{"STANDARD_WEBHOOK_SECRET": testPublicKey},
			"STANDARD_WEBHOOK_SECRET: entry 0 (counting from 0) is a Standard Webhooks public key (whpk_), not a secret"},
		{"standard secret beside the public key", map[string]string{"STANDARD_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw," + testPublicKey, "STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey},
			"STANDARD_WEBHOOK_SECRET: entry 1 (counting from 0) is a Standard Webhooks public key (whpk_), not a secret"},
		{"another provider's secret", map[string]string{"STRIPE_WEBHOOK_SECRET": testPublicKey},
			"STRIPE_WEBHOOK_SECRET: entry 0 (counting from 0) is a Standard Webhooks public key (whpk_), not a secret"},
		{"the public key, bare, as the v1 secret", map[string]string{"STANDARD_WEBHOOK_SECRET": bareTestPublicKey, "STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey},
			"STANDARD_WEBHOOK_SECRET: entry 0 (counting from 0) is one of the source's public keys"},
		{"the public key, as a whsec_ secret", map[string]string{"STANDARD_WEBHOOK_SECRET": "whsec_" + bareTestPublicKey, "STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey},
			"STANDARD_WEBHOOK_SECRET: entry 0 (counting from 0) is one of the source's public keys"},
		{"inline secrets", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    secrets: [`+testPublicKey+`]
`)}, "sources[0] (partner): secrets[0] is a Standard Webhooks public key (whpk_), not a secret"},
		{"secrets_env", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    secrets_env: PARTNER_SECRETS
`), "PARTNER_SECRETS": testPublicKey}, "sources[0] (partner): secrets_env PARTNER_SECRETS: entry 0 (counting from 0) is a Standard Webhooks public key (whpk_)"},
		{"secrets_file", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    secrets_file: `+secretFile+`
`)}, "sources[0] (partner): secrets_file: entry 1 (counting from 0) is a Standard Webhooks public key (whpk_)"},
		{"file secret that is the public key", map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    secrets_env: PARTNER_SECRETS
    public_keys: [`+testPublicKey+`]
`), "PARTNER_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw," + bareTestPublicKey}, "entry 1 (counting from 0) is one of the source's public keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env))
			require.ErrorContains(t, err, tc.want)
			for _, s := range c.Sources {
				if s.Provider != "standard" {
					require.Empty(t, s.Secrets, "the refused entry was the source's only secret")
					continue
				}
				for i, sec := range s.Secrets {
					if strings.HasPrefix(sec.Reveal(), "whpk_") {
						for _, after := range s.Secrets[i:] {
							require.True(t, strings.HasPrefix(after.Reveal(), "whpk_"), "a refused whpk_ secret is not kept among the secrets")
						}
						break
					}
				}
			}
		})
	}
}

// TestStandardKeysKeepTheirOrigin: a source with both kinds lists its v1
// secrets, then its public keys, each exactly as given.
func TestStandardKeysKeepTheirOrigin(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    secrets_env: PARTNER_SECRETS
    public_keys: [`+testPublicKey+`]
    public_keys_env: PARTNER_KEYS
`), "PARTNER_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "PARTNER_KEYS": testPublicKey2}))
	require.NoError(t, err)
	s, ok := c.Source("partner")
	require.True(t, ok)
	require.Equal(t, []Secret{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", testPublicKey, testPublicKey2}, s.Secrets)
}
