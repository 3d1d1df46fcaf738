package app

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/shortcircuit"
)

// shortCircuit builds the Redis short-circuit when REDIS_URL is set and
// duplicates are enforced (log-only applies every delivery again), and
// registers its metrics; otherwise it returns nil, no Redis.
func (a *App) shortCircuit() (*shortcircuit.Gate, error) {
	if a.cfg.RedisURL == "" || a.cfg.ClaimMode == config.ClaimLogOnly {
		return nil, nil
	}
	// Keys carry the ledger's identity: markers of another database, or of
	// this one before a restore (`hookledger redis forget`), are not read.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	identity, err := ledger.Identity(ctx, a.db)
	if err != nil {
		return nil, err
	}
	g, err := shortcircuit.New(shortcircuit.Options{URL: a.cfg.RedisURL.Reveal(), Prefix: a.cfg.RedisKeyPrefix + identity + ":",
		TTL: a.cfg.RedisTTL, Timeout: a.cfg.RedisTimeout})
	if err != nil {
		return nil, err
	}
	a.metrics.Registry.MustRegister(g.Collectors()...)
	a.gate = g
	// REDIS_TIMEOUT is the shortest a lookup waits; the timeout follows
	// Redis's measured latency up to the ceiling.
	a.log.Info("duplicate short-circuit on", zap.String("redis", config.RedactURL(a.cfg.RedisURL.Reveal())),
		zap.Duration("ttl", a.cfg.RedisTTL), zap.Duration("timeout_min", a.cfg.RedisTimeout),
		zap.Duration("timeout_max", max(a.cfg.RedisTimeout, shortcircuit.DefaultMaxTimeout)))
	return g, nil
}
