package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRedisIsOptional(t *testing.T) {
	t.Parallel()
	c, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Empty(t, c.RedisURL, "no REDIS_URL, no Redis")
	require.Equal(t, 60*time.Second, c.RedisTTL)
	require.Equal(t, 5*time.Millisecond, c.RedisTimeout)
	require.Equal(t, "hookledger:sc:", c.RedisKeyPrefix)

	c, err = FromEnv(env(map[string]string{"REDIS_URL": "redis://:pw@127.0.0.1:6379/2", "REDIS_TTL": "30s", "REDIS_TIMEOUT": "3ms"}))
	require.NoError(t, err)
	require.Equal(t, "redis://:pw@127.0.0.1:6379/2", c.RedisURL.Reveal())
	require.Equal(t, "[redacted]", c.RedisURL.String())
	require.Equal(t, 30*time.Second, c.RedisTTL)
	require.Equal(t, 3*time.Millisecond, c.RedisTimeout)
	require.Empty(t, c.Warnings)
}

func TestRedisValidation(t *testing.T) {
	t.Parallel()
	_, err := FromEnv(env(map[string]string{"REDIS_URL": "http://127.0.0.1:6379", "REDIS_TTL": "0", "REDIS_TIMEOUT": "5s"}))
	require.Error(t, err)
	for _, want := range []string{"REDIS_URL: want redis://", "REDIS_TTL=0s", "REDIS_TIMEOUT=5s"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "127.0.0.1", "the URL may hold a password: it is never echoed")

	_, err = FromEnv(env(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "REDIS_TTL": "720h"}))
	require.ErrorContains(t, err, "REDIS_TTL=720h0m0s: want a duration from 1s to 10m0s")
	_, err = FromEnv(env(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "REDIS_TTL": "10m"}))
	require.NoError(t, err)

	c, err := FromEnv(env(map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "CLAIM_MODE": "log-only"}))
	require.NoError(t, err)
	require.Contains(t, c.Warnings, "REDIS_URL is set but CLAIM_MODE=log-only applies every delivery again: the Redis short-circuit is off")
}
