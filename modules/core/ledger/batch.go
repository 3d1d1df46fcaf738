package ledger

import (
	"context"
	"sync/atomic"
	"time"
)

// Batcher is group commit for claims: concurrent deliveries are gathered
// into one transaction, the claim of Store.Claim run for all of them (one
// INSERT ... ON CONFLICT DO NOTHING RETURNING and one apply_batch job for
// the events it claimed, which a worker applies in one transaction too),
// and each request still gets its own answer, only after the commit. An idle Batcher adds no wait:
// a request finds an idle committer and goes alone; under load, requests
// that arrive while every committer is busy ride in the next transaction.
// If a batch fails, each of its requests is claimed again in a transaction
// of its own, so one bad row cannot fail the others.
type Batcher struct {
	store    *Store
	requests chan *waiting
	maxBatch int
	// Batches counts committed batches and Claims the requests in them.
	Batches, Claims atomic.Int64
	// LateClaim, when set, is told of a claim that committed after its
	// request stopped waiting (its deadline passed: the client was
	// answered 503): the row exists, and the provider's retry will be a
	// duplicate. It runs on the committer's goroutine.
	LateClaim func(Claim)
}

type waiting struct {
	ctx    context.Context
	claim  Claim
	result ClaimResult
	err    error
	done   chan struct{}
	// owner decides who has the result: the committer that delivers it
	// (delivered) or the request that stopped waiting first (gaveUp).
	owner atomic.Int32
}

const (
	delivered = iota + 1
	gaveUp
)

// finish hands p its result, or reports a claim its request no longer
// waits for (LateClaim).
func (b *Batcher) finish(p *waiting) {
	close(p.done)
	if !p.owner.CompareAndSwap(0, delivered) && p.err == nil && p.result == Claimed && b.LateClaim != nil {
		b.LateClaim(p.claim)
	}
}

// NewBatcher starts the given number of committer goroutines, which claim
// through s; they stop when ctx ends.
func NewBatcher(ctx context.Context, s *Store, committers, maxBatch int) *Batcher {
	b := &Batcher{store: s, requests: make(chan *waiting, committers*maxBatch), maxBatch: maxBatch}
	for range committers {
		go b.commitLoop(ctx)
	}
	return b
}

// Queued is the number of requests waiting for a committer: the depth of
// the group-commit queue.
func (b *Batcher) Queued() int { return len(b.requests) }

// Claim waits for the batch holding in to commit and returns what it did
// with this request: Claimed for the first request of a new event. A
// payload that jsonb would refuse is refused before it joins a batch.
func (b *Batcher) Claim(ctx context.Context, in Claim) (ClaimResult, error) {
	if err := in.check(); err != nil {
		return 0, err
	}
	p := &waiting{ctx: ctx, claim: in, done: make(chan struct{})}
	select {
	case b.requests <- p:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if p.owner.CompareAndSwap(0, gaveUp) {
			// The batch may still commit (LateClaim); the provider
			// retries and gets a duplicate.
			return 0, ctx.Err()
		}
		<-p.done // the committer delivered first
	}
	return p.result, p.err
}

func (b *Batcher) commitLoop(ctx context.Context) {
	batch := make([]*waiting, 0, b.maxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-b.requests:
			batch = append(batch[:0], p)
		}
	drain:
		for len(batch) < b.maxBatch {
			select {
			case p := <-b.requests:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		b.commit(batch)
	}
}

// commit claims a batch in one transaction, or each request alone when the
// batch fails.
func (b *Batcher) commit(batch []*waiting) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.err = p.ctx.Err()
			b.finish(p)
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 {
		rows := make([]Claim, len(live))
		for i, p := range live {
			rows[i] = p.claim
		}
		ctx, cancel := batchContext(live)
		res, err := b.store.claim(ctx, rows)
		cancel()
		if err == nil {
			b.Batches.Add(1)
			b.Claims.Add(int64(len(live)))
			for i, p := range live {
				p.result = res[i]
				b.finish(p)
			}
			return
		}
	}
	for _, p := range live {
		ctx, cancel := batchContext([]*waiting{p})
		p.result, p.err = b.store.Claim(ctx, p.claim)
		cancel()
		b.finish(p)
	}
}

// batchContext ends at the latest deadline of the batch's requests: the
// batch serves all of them. A request that stops waiting before then does
// not cancel the claim, which the others (or the provider's retry) still
// need; if it commits, finish reports it as late.
// A request claimed alone keeps its context's values (its trace).
func batchContext(batch []*waiting) (context.Context, context.CancelFunc) {
	base := context.Background()
	if len(batch) == 1 {
		base = context.WithoutCancel(batch[0].ctx)
	}
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.WithCancel(base)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}
