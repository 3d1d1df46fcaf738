// Package shortcircuit is the optional Redis short-circuit in front of the
// ledger's claim (REDIS_URL). A delivery whose key has a fresh marker is a
// duplicate the ledger has already committed, and is answered without a
// database transaction; that keeps a provider's retry storm, or a replay of
// a large window, off PostgreSQL.
//
// Redis is never the source of truth:
//   - a marker is written only after the ledger's answer is known (claimed,
//     or a duplicate answered by PostgreSQL), so it can never hide an event
//     the ledger does not hold; it expires after a TTL (60 s by default);
//   - markers are written by a background writer from a bounded queue, so
//     writing one adds no latency to the answer; a full queue, a failed
//     write or a shutdown drops the marker, which only costs the next
//     duplicate a database transaction;
//   - every lookup has a timeout that follows Redis's measured latency:
//     twice the p99 of the last 1,024 lookups, at least REDIS_TIMEOUT and
//     at most 100 ms (or REDIS_TIMEOUT when longer), so a loaded host still
//     gets its answers while a dead server costs a delivery little; an
//     error, a timeout or an unreachable server means "no marker" and the
//     delivery is claimed as without Redis;
//   - a circuit breaker stops asking a server when at least half of 20 or
//     more calls in the last 10 s failed (a lookup fails when it got an
//     error, or waited the longest timeout in vain), and after a pause
//     lets one probe through at a time; the pause is 1 s and doubles with
//     each failed probe (or reopening within 10 s of closing), up to 30 s.
//
// Flushing Redis, restarting it or pointing at an empty one loses nothing.
//
// Keys are the prefix, the namespace and the event id
// ("hookledger:sc:stripe:evt_1"); an id too long for a readable key is
// replaced by its SHA-256 ("hookledger:sc:stripe#<hex>").
//
// Metrics: hookledger_redis_shortcircuit_total{source},
// hookledger_redis_errors_total{op}, hookledger_redis_breaker_open,
// hookledger_redis_markers_dropped_total and
// hookledger_redis_lookup_timeout_seconds.
package shortcircuit
