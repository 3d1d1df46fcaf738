package ledger

import (
	"context"
	"database/sql"
	"time"
)

// BacklogQuery is the statement Backlog runs, for the plan test.
const BacklogQuery = backlogQuery

// WrapTx is a Tx on tx with no ent client and no jobs, for the plan test,
// which applies on one connection of its own.
func WrapTx(tx *sql.Tx) *Tx { return &Tx{Tx: tx} }

// CheckPayloadFully is CheckPayload without its fast path.
var CheckPayloadFully = checkPayload

// WithLingerGate makes the appliers of o linger until gate returns,
// instead of until their job is ApplyLinger old.
func WithLingerGate(o RiverOptions, gate func(ctx context.Context)) RiverOptions {
	o.lingerGate = gate
	return o
}

// PutPayload, TakePayload and PayloadBytes reach a Payloads as the claim
// and the apply do; PayloadRefs is the length and capacity of its order.
func PutPayload(p *Payloads, k EventKey, payload []byte, now time.Time) { p.put(k, payload, now) }
func TakePayload(p *Payloads, k EventKey, now time.Time) ([]byte, bool) { return p.take(k, now) }
func PayloadBytes(p *Payloads) int                                      { p.mu.Lock(); defer p.mu.Unlock(); return p.bytes }
func PayloadRefs(p *Payloads) (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.order) - p.head, cap(p.order)
}

// ClaimBatch claims rows in one transaction, as one group commit does.
func ClaimBatch(ctx context.Context, s *Store, rows []Claim) ([]ClaimResult, error) {
	return s.claim(ctx, rows)
}

// JobsThroughRiver makes s insert its claims' jobs with River's
// InsertManyTx, as under log-only or with insert middleware.
func JobsThroughRiver(s *Store) { s.jobsInStatement = false }

// RetryBase is retryBase, RetryDelay without jitter.
var RetryBase = retryBase

// LiveJobsSQL counts the live apply jobs that carry event $1/$2.
const LiveJobsSQL = liveJobsSQL
