package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOptionTable: every option is named once, documented and grouped,
// and a secret's _FILE form is no option of its own.
func TestOptionTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, o := range Options() {
		require.False(t, seen[o.Name], "%s is in the table once", o.Name)
		seen[o.Name] = true
		require.NotEmpty(t, o.Doc, o.Name)
		require.NotEmpty(t, o.Group, o.Name)
		require.False(t, o.PublicKeys && o.Provider == "", o.Name)
	}
	for name := range seen {
		require.False(t, seen[name+"_FILE"], "%s_FILE is the secret's own form", name)
	}
}

// TestDefaultsAreTheConstants: the table's defaults are the exported
// defaults that the rest of hookledger reads.
func TestDefaultsAreTheConstants(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, DefaultHTTPAddr, c.HTTPAddr)
	require.Equal(t, int64(DefaultMaxBodyBytes), c.MaxBodyBytes)
	require.False(t, c.MaxBodyBytesSet)
	require.Equal(t, int64(DefaultInflightBodyBytes), c.InflightBodyBytes)
	require.Equal(t, DefaultClaimTimeout, c.ClaimTimeout)
	require.Equal(t, DefaultRetention, c.Retention)
	require.Equal(t, DefaultKeyRetention, c.KeyRetention)
	require.Equal(t, DefaultWorkers, c.Workers)
	require.Equal(t, DefaultClaimCommitters, c.ClaimCommitters)
	require.Equal(t, DefaultApplyLinger, c.ApplyLinger)
	require.Equal(t, DefaultDBMaxConns, c.DBMaxConns)
	require.Equal(t, DefaultPublishedIPsMaxAge, c.PublishedIPsMaxAge)
	require.Equal(t, DefaultRedisTTL, c.RedisTTL)
	require.Equal(t, DefaultRedisTimeout, c.RedisTimeout)
	require.Equal(t, DefaultRedisKeyPrefix, c.RedisKeyPrefix)
	require.Equal(t, 5*time.Second, c.ReadHeaderTimeout)
	require.Equal(t, 30*time.Second, c.ReadTimeout)
	require.Equal(t, time.Hour, c.ReconcileWindow)
	require.True(t, c.GroupCommit)
	require.Equal(t, 256, c.ClaimBatchMax)
	require.Equal(t, PoolerNone, c.DatabasePooler)
	require.Equal(t, "https://api.stripe.com", c.StripeAPIBase)
	require.Equal(t, "info", c.LogLevel)
	require.Equal(t, "json", c.LogFormat)
}

// TestValueThatDoesNotParseLeavesTheDefault: an unreadable value is
// reported and the default stands; a readable one out of range is
// reported and kept, as the checks across options see it.
func TestValueThatDoesNotParseLeavesTheDefault(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(map[string]string{"WORKERS": "many", "CLAIM_TIMEOUT": "0", "RETENTION": "24h", "KEY_RETENTION": "100h"}))
	require.ErrorContains(t, err, `WORKERS="many": want a positive whole number`)
	require.ErrorContains(t, err, "CLAIM_TIMEOUT=0s: want a positive duration such as 2s")
	require.NotContains(t, err.Error(), "KEY_RETENTION=", "100h is not below the RETENTION given")
	require.Equal(t, DefaultWorkers, c.Workers)
	require.Zero(t, c.ClaimTimeout)
	require.Equal(t, 24*time.Hour, c.Retention)
}

// TestSecretFileNamedInMessages: a secret read through the variable's
// _FILE form is trimmed, and messages about its entries name NAME_FILE.
func TestSecretFileNamedInMessages(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "  "+testPublicKey+"\n")
	_, err := FromEnv(env(map[string]string{"GITHUB_WEBHOOK_SECRET_FILE": path}))
	require.ErrorContains(t, err, "GITHUB_WEBHOOK_SECRET_FILE: entry 0 (counting from 0) is a Standard Webhooks public key")
}

// TestProviderFactsMatchTheVariables: the providers copied from package
// provider are those with a secret variable, and a provider that verifies
// with public keys has a variable for them.
func TestProviderFactsMatchTheVariables(t *testing.T) {
	t.Parallel()
	var names []string
	for name, p := range providers {
		names = append(names, name)
		_, ok := publicKeyOption(name)
		require.Equal(t, p.publicKeyPrefix != "", ok, name)
	}
	require.ElementsMatch(t, names, ProviderNames())
	require.Equal(t, []string{"stripe", "github", "shopify", "paddle", "slack", "standard"}, ProviderNames())
}

// TestFileKeysDocumentEveryKey: the documented keys are exactly the keys
// a config-file source may have.
func TestFileKeysDocumentEveryKey(t *testing.T) {
	t.Parallel()
	var documented []string
	for _, k := range FileKeys() {
		require.NotEmpty(t, k.Doc, k.Key)
		documented = append(documented, k.Key)
	}
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			keys = append(keys, prefix+name)
			if ft := t.Field(i).Type; ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
				walk(ft.Elem(), prefix+name+".")
			}
		}
	}
	walk(reflect.TypeOf(fileSource{}), "")
	require.Equal(t, keys, documented)
}
