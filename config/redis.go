package config

import "time"

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
