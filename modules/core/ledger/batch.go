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
}

type waiting struct {
	ctx    context.Context
	claim  Claim
	result ClaimResult
	err    error
	done   chan struct{}
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
		return p.result, p.err
	case <-ctx.Done():
		// The batch may still commit; the provider retries and gets a duplicate.
		return 0, ctx.Err()
	}
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
			close(p.done)
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
				close(p.done)
			}
			return
		}
	}
	for _, p := range live {
		p.result, p.err = b.store.Claim(p.ctx, p.claim)
		close(p.done)
	}
}

// batchContext ends at the latest deadline of the batch's requests: the
// batch serves all of them.
func batchContext(batch []*waiting) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
