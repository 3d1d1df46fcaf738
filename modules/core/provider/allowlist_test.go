package provider

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAllowListMatchesCIDRsAndPublishedLists(t *testing.T) {
	t.Parallel()
	stripe, err := ParsePublished("stripe", []byte(`{"WEBHOOKS":["3.18.12.63","54.187.216.72"]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"3.18.12.63/32", "54.187.216.72/32"}, stripe)
	github, err := ParsePublished("github", []byte(`{"hooks":["192.30.252.0/22","2a0a:a440::/29"],"web":["1.1.1.0/24"]}`))
	require.NoError(t, err)
	_, err = ParsePublished("github", []byte(`{"web":["1.1.1.0/24"]}`))
	require.ErrorContains(t, err, "no addresses")

	pub := &PublishedIPs{Origin: "test", Lists: map[string]PublishedList{
		"stripe": {FetchedAt: time.Now(), Prefixes: stripe}, "github": {FetchedAt: time.Now(), Prefixes: github},
	}}
	l, err := NewAllowList([]string{"stripe", "github", "10.0.0.0/8", "2001:db8::1"}, pub)
	require.NoError(t, err)
	require.Equal(t, []string{"stripe", "github"}, l.Published)
	for addr, want := range map[string]bool{
		"3.18.12.63": true, "3.18.12.64": false, "192.30.253.9": true, "2a0a:a440::5": true, "::ffff:10.2.3.4": true,
		"2001:db8::1": true, "2001:db8::2": false, "8.8.8.8": false, "not an address": false, "": false,
	} {
		require.Equal(t, want, l.Allows(addr), addr)
	}

	shipped, err := LoadPublishedIPs("")
	require.NoError(t, err)
	require.Equal(t, "shipped", shipped.Origin)
	require.NotEmpty(t, shipped.Lists["stripe"].Prefixes)
	require.NotEmpty(t, shipped.Lists["github"].Prefixes)
	_, err = NewAllowList([]string{"stripe"}, &PublishedIPs{Origin: "empty"})
	require.ErrorContains(t, err, "run hookledger ips update")
}
