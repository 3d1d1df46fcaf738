package config

import (
	"net/url"
	"time"
)

// Defaults of the Redis short-circuit.
const (
	DefaultRedisTTL       = 60 * time.Second
	DefaultRedisTimeout   = 5 * time.Millisecond
	DefaultRedisKeyPrefix = "hookledger:sc:"
	// MaxRedisTTL bounds a marker's lifetime: the short-circuit exists for
	// retry storms, which last minutes, and the shorter a marker lives the
	// less a history the ledger no longer holds can answer for it.
	MaxRedisTTL = 10 * time.Minute
)

// loadRedis reads REDIS_URL, REDIS_TTL, REDIS_TIMEOUT and REDIS_KEY_PREFIX.
func (c *Config) loadRedis(getenv func(string) string, fail func(string, ...any)) {
	c.RedisKeyPrefix = or(getenv("REDIS_KEY_PREFIX"), DefaultRedisKeyPrefix)
	c.RedisTTL = durationVar(getenv, "REDIS_TTL", DefaultRedisTTL, fail)
	c.RedisTimeout = durationVar(getenv, "REDIS_TIMEOUT", DefaultRedisTimeout, fail)
	if c.RedisTTL < time.Second || c.RedisTTL > MaxRedisTTL {
		fail("REDIS_TTL=%s: want a duration from 1s to %s such as 60s (markers absorb retry storms; the ledger is the record)", c.RedisTTL, MaxRedisTTL)
	}
	if c.RedisTimeout <= 0 || c.RedisTimeout > time.Second {
		fail("REDIS_TIMEOUT=%s: want a small positive duration such as 5ms (at most 1s: Redis must never slow an answer down)", c.RedisTimeout)
	}
	if c.RedisURL == "" {
		return
	}
	u, err := url.Parse(c.RedisURL.Reveal())
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		fail("REDIS_URL: want redis://host:port[/db], rediss:// (TLS) or unix:///path")
	}
	if c.ClaimMode == ClaimLogOnly {
		c.Warnings = append(c.Warnings, "REDIS_URL is set but CLAIM_MODE=log-only applies every delivery again: the Redis short-circuit is off")
	}
}
