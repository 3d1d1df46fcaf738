package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Tallies DeliveryStats keeps beside a delivery's outcome.
const (
	// StatReplayed counts deliveries that carried the source's replay token.
	StatReplayed = "replayed"
	// StatWouldSkip counts duplicates applied again under CLAIM_MODE=log-only.
	StatWouldSkip = "would_skip"
	// StatForbidden counts deliveries refused because the client's address
	// is outside the source's allow_ips.
	StatForbidden = "forbidden"
	// StatLateClaim counts claims that committed after their request had
	// been answered 503 (the claim's deadline passed while it committed):
	// the row exists, so they count as claimed too.
	StatLateClaim = "late_claim"
	// StatMismatch counts duplicates whose body differs from the stored
	// one (DuplicateCheck).
	StatMismatch = "mismatch"
)

// Tally counts one of the tallies above (StatForbidden, StatLateClaim,
// StatMismatch) for source, apart from any answer.
func (s *DeliveryStats) Tally(source, tally string) {
	if s == nil {
		return
	}
	m := time.Now().Unix() / 60 * 60
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[statKey{m, source, tally}]++
}

// StatFlushInterval is how often a receiver adds its counts to
// delivery_stat: what a crash of the process can lose.
const StatFlushInterval = 5 * time.Second

type statKey struct {
	minute          int64 // Unix seconds at the start of the minute
	source, outcome string
}

// DeliveryStats counts a receiver's answers per source, minute and outcome
// in memory, and adds them to delivery_stat when flushed: one statement
// every few seconds, not a write per request. Counts that a flush could not
// write are kept for the next one; a crash loses what was not yet flushed.
// A nil *DeliveryStats counts nothing.
type DeliveryStats struct {
	db *sql.DB

	mu     sync.Mutex
	counts map[statKey]int64
	// flushMu orders flushes, so a reader that flushes first sees every
	// count this process answered before it.
	flushMu sync.Mutex
}

// NewDeliveryStats returns an empty aggregate writing to db.
func NewDeliveryStats(db *sql.DB) *DeliveryStats {
	return &DeliveryStats{db: db, counts: map[statKey]int64{}}
}

// Add counts one answered delivery of source with outcome (a value of
// hookledger_deliveries_total{outcome}); replayed also counts it as
// StatReplayed, and wouldSkip (a duplicate CLAIM_MODE=log-only let
// through, ClaimResult.WouldSkip) as StatWouldSkip.
func (s *DeliveryStats) Add(source, outcome string, replayed, wouldSkip bool) {
	if s == nil {
		return
	}
	m := time.Now().Unix() / 60 * 60
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[statKey{m, source, outcome}]++
	if replayed {
		s.counts[statKey{m, source, StatReplayed}]++
	}
	if wouldSkip {
		s.counts[statKey{m, source, StatWouldSkip}]++
	}
}

// Flush adds the counts gathered since the last flush to delivery_stat in
// one additive upsert. On error the counts are kept for the next flush.
func (s *DeliveryStats) Flush(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	taken := s.counts
	s.counts = map[statKey]int64{}
	s.mu.Unlock()
	if len(taken) == 0 {
		return nil
	}
	keys := make([]statKey, 0, len(taken))
	for k := range taken {
		keys = append(keys, k)
	}
	// Key order, so concurrent flushes of several receivers cannot deadlock.
	slices.SortFunc(keys, func(a, b statKey) int {
		return cmp.Or(cmp.Compare(a.minute, b.minute), cmp.Compare(a.source, b.source), cmp.Compare(a.outcome, b.outcome))
	})
	minutes := make([]time.Time, len(keys))
	sources := make([]string, len(keys))
	outcomes := make([]string, len(keys))
	counts := make([]int64, len(keys))
	for i, k := range keys {
		minutes[i], sources[i], outcomes[i], counts[i] = time.Unix(k.minute, 0).UTC(), k.source, k.outcome, taken[k]
	}
	_, err := s.db.ExecContext(ctx, `
		INSERT INTO delivery_stat (minute, source, outcome, count)
		SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[])
		ON CONFLICT (minute, source, outcome) DO UPDATE SET count = delivery_stat.count + EXCLUDED.count`,
		minutes, sources, outcomes, counts)
	if err != nil {
		s.mu.Lock()
		for k, n := range taken {
			s.counts[k] += n
		}
		s.mu.Unlock()
		return fmt.Errorf("flush delivery stats: %w", err)
	}
	return nil
}

// Run flushes every interval until ctx ends, then once more with a short
// budget of its own. A failed flush is logged and retried at the next tick.
func (s *DeliveryStats) Run(ctx context.Context, interval time.Duration, log *zap.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Flush(fctx); err != nil {
				log.Warn("delivery stats lost at shutdown", zap.Error(err))
			}
			return
		case <-t.C:
			if err := s.Flush(ctx); err != nil && ctx.Err() == nil {
				log.Warn("delivery stats not flushed; kept for the next try", zap.Error(err))
			}
		}
	}
}

// DeliveryCount is the deliveries of one source and outcome in a window.
type DeliveryCount struct {
	Source  string
	Outcome string
	Count   int64
	// Last is the start of the newest minute with such a delivery.
	Last time.Time
}

// DeliveryCounts sums delivery_stat since since, per source and outcome.
func (s *Store) DeliveryCounts(ctx context.Context, since time.Time) ([]DeliveryCount, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT source, outcome, sum(count)::bigint, max(minute) FROM delivery_stat
		WHERE minute >= $1 GROUP BY source, outcome ORDER BY source, outcome`, since.Truncate(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("delivery counts: %w", err)
	}
	defer rows.Close()
	var out []DeliveryCount
	for rows.Next() {
		var c DeliveryCount
		if err := rows.Scan(&c.Source, &c.Outcome, &c.Count, &c.Last); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeliveryPoint is one minute's deliveries of one outcome, all sources.
type DeliveryPoint struct {
	Minute  time.Time
	Outcome string
	Count   int64
}

// DeliverySeries returns delivery_stat since since in buckets of step
// (a whole number of minutes), summed over sources, oldest first.
func (s *Store) DeliverySeries(ctx context.Context, since time.Time, step time.Duration) ([]DeliveryPoint, error) {
	stepSec := max(int64(step/time.Second)/60*60, 60)
	rows, err := s.db.QueryContext(ctx, `
		SELECT to_timestamp(floor(extract(epoch FROM minute) / $2) * $2), outcome, sum(count)::bigint
		FROM delivery_stat WHERE minute >= $1 GROUP BY 1, 2 ORDER BY 1, 2`, since.Truncate(time.Minute), stepSec)
	if err != nil {
		return nil, fmt.Errorf("delivery series: %w", err)
	}
	defer rows.Close()
	var out []DeliveryPoint
	for rows.Next() {
		var p DeliveryPoint
		if err := rows.Scan(&p.Minute, &p.Outcome, &p.Count); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// statSecret starts the tally of the claims a source's secret verified:
// "secret:<index>:<fingerprint>" (SecretTally). The console reads which
// secret is in use from these, a day of minutes, rather than from a day of
// ledger rows.
const statSecret = "secret:"

// TallySecret counts a claimed delivery under the secret that verified
// it: its position and its fingerprint (Claim.SecretIndex and
// SecretFingerprint), for c.Source. A claim no secret verified (a replay)
// counts nothing.
func (s *DeliveryStats) TallySecret(c Claim) {
	if c.SecretIndex == nil {
		return
	}
	s.Tally(c.Source, SecretOutcome(*c.SecretIndex, c.SecretFingerprint))
}

// SecretOutcome is the delivery_stat outcome TallySecret counts a claim
// under: "secret:<index>:<fingerprint>".
func SecretOutcome(index int, fingerprint string) string {
	return statSecret + strconv.Itoa(index) + ":" + fingerprint
}

// SecretTally reads a tally TallySecret counted: the secret's position
// and its fingerprint ("" for a delivery whose fingerprint was not
// recorded). ok is false for any other outcome.
func SecretTally(outcome string) (index int, fingerprint string, ok bool) {
	rest, ok := strings.CutPrefix(outcome, statSecret)
	if !ok {
		return 0, "", false
	}
	i, fp, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	index, err := strconv.Atoi(i)
	if err != nil || index < 0 {
		return 0, "", false
	}
	return index, fp, true
}
