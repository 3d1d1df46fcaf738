package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	testPublicKey  = "whpk_6/WfjCrmmUwoIE/o0BcxQdgpS3LjR98L7Nnx6v3ekFA="
	testPublicKey2 = "whpk_A2fYbT5b1BmcXtKSM5ZbHN9e2uiGgC3kEd0M4E0A2Z8="
)

func TestStandardPublicKeyAloneEnablesTheSource(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey + ", " + testPublicKey2}))
	require.NoError(t, err)
	s, ok := c.Source("standard")
	require.True(t, ok)
	require.Equal(t, []Secret{testPublicKey, testPublicKey2}, s.Secrets)

	c, err = FromEnv(env(map[string]string{"STANDARD_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "STANDARD_WEBHOOK_PUBLIC_KEY": testPublicKey}))
	require.NoError(t, err)
	s, _ = c.Source("standard")
	require.Equal(t, []Secret{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", testPublicKey}, s.Secrets, "secrets first, then public keys")
}

func TestStandardSigningKeyIsRefused(t *testing.T) {
	t.Parallel()
	_, err := FromEnv(env(map[string]string{"STANDARD_WEBHOOK_SECRET": "whsk_c2VjcmV0"}))
	require.ErrorContains(t, err, "signing key (whsk_)")

	_, err = FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys_env: PARTNER_KEYS
`), "PARTNER_KEYS": testPublicKey + ",whsk_c2VjcmV0"}))
	require.ErrorContains(t, err, "public_keys_env PARTNER_KEYS: entry 1 (counting from 0) is a Standard Webhooks signing key (whsk_)")
}

func TestPublicKeysInTheConfigFile(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: standard
    namespace: partner
    public_keys: [`+testPublicKey+`]
`)}))
	require.NoError(t, err)
	s, ok := c.Source("partner")
	require.True(t, ok, "public keys alone enable the source")
	require.Equal(t, []Secret{testPublicKey}, s.Secrets)

	_, err = FromEnv(env(map[string]string{"HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: partner
    provider: stripe
    namespace: partner
    public_keys: [`+testPublicKey+`]
  - name: other
    provider: standard
    namespace: other
    public_keys: [whsec_notapublickey]
`)}))
	require.ErrorContains(t, err, "public_keys and public_keys_env apply to standard sources only")
	require.ErrorContains(t, err, "public_keys[0] is a v1 secret (whsec_), not a public key")
}
