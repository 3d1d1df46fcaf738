package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllowIPsAndTrustedProxies(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: locked
    provider: stripe
    namespace: locked
    secrets: [whsec_x]
    allow_ips: [stripe, 203.0.113.0/24, "2001:db8::1"]
`)}))
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "192.0.2.1"}, c.TrustedProxies)
	s, _ := c.Source("locked")
	require.Equal(t, []string{"stripe", "203.0.113.0/24", "2001:db8::1"}, s.AllowIPs)
	require.Equal(t, DefaultPublishedIPsMaxAge, c.PublishedIPsMaxAge)

	_, err = FromEnv(env(map[string]string{"TRUSTED_PROXIES": "everyone", "HOOKLEDGER_CONFIG": writeFile(t, `
sources:
  - name: locked
    provider: stripe
    namespace: locked
    secrets: [whsec_x]
    allow_ips: [strpie, 10.0.0.0/33]
`)}))
	require.ErrorContains(t, err, `TRUSTED_PROXIES: "everyone" is neither a CIDR nor an address`)
	require.ErrorContains(t, err, `allow_ips[0] "strpie": want a CIDR, an address, stripe or github`)
	require.ErrorContains(t, err, `allow_ips[1] "10.0.0.0/33"`)
}
