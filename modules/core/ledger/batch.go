package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
)

// Batcher is group commit for claims: concurrent deliveries are gathered
// into one transaction (one multi-row INSERT ... ON CONFLICT DO NOTHING
// RETURNING and one apply_batch job for the events it claimed, which a
// worker applies in one transaction too), and each request still
// gets its own answer, only after the commit. An idle Batcher adds no wait:
// a request finds an idle committer and goes alone; under load, requests
// that arrive while every committer is busy ride in the next transaction.
// If a batch fails, each of its requests is claimed again in a transaction
// of its own, so one bad row cannot fail the others.
type Batcher struct {
	claimer  *Store
	requests chan *waiting
	maxBatch int
	// Batches counts committed batches and Claims the requests in them.
	Batches, Claims atomic.Int64
}

type waiting struct {
	ctx     context.Context
	claim   Claim
	claimed bool
	err     error
	done    chan struct{}
}

// NewBatcher starts the given number of committer goroutines, which claim through c's database
// and River client; they stop when ctx ends.
func NewBatcher(ctx context.Context, c *Store, committers, maxBatch int) *Batcher {
	b := &Batcher{claimer: c, requests: make(chan *waiting, committers*maxBatch), maxBatch: maxBatch}
	for range committers {
		go b.commitLoop(ctx)
	}
	return b
}

// Queued is the number of requests waiting for a committer: the depth of
// the group-commit queue.
func (b *Batcher) Queued() int { return len(b.requests) }

// Claim waits for the batch holding in to commit and returns whether this
// request claimed the event. A payload that jsonb would refuse is refused
// before it joins a batch.
func (b *Batcher) Claim(ctx context.Context, in Claim) (bool, error) {
	if err := CheckPayload(in.Payload); err != nil {
		return false, fmt.Errorf("claim %s/%s: %w", in.Namespace, in.EventID, err)
	}
	p := &waiting{ctx: ctx, claim: in, done: make(chan struct{})}
	select {
	case b.requests <- p:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case <-p.done:
		return p.claimed, p.err
	case <-ctx.Done():
		// The batch may still commit; the provider retries and gets a duplicate.
		return false, ctx.Err()
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
		ctx, cancel := batchContext(live)
		err := b.claimBatch(ctx, live)
		cancel()
		if err == nil {
			b.Batches.Add(1)
			b.Claims.Add(int64(len(live)))
			for _, p := range live {
				close(p.done)
			}
			return
		}
	}
	for _, p := range live {
		p.claimed, p.err = b.claimer.Claim(p.ctx, p.claim)
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

// claimBatch inserts the batch's rows in key order (so concurrent batches
// lock in the same order and cannot deadlock), learns from RETURNING which
// keys this transaction inserted, gives each inserted key's first request
// the claim, and enqueues their jobs with InsertManyTx.
func (b *Batcher) claimBatch(ctx context.Context, batch []*waiting) error {
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].claim.key().less(batch[j].claim.key()) })
	n := len(batch)
	var (
		namespaces, eventIDs, providers, sources, types, headers = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads                                                 = make([]string, n) // text whatever pgx's query mode (bytes would go as bytea)
		secretIdx, skews                                         = make([]*int64, n), make([]*int64, n)
		occurred                                                 = make([]*time.Time, n)
		replayed                                                 = make([]bool, n)
		digests                                                  = make([]*string, n)
	)
	for i, p := range batch {
		c := p.claim
		namespaces[i], eventIDs[i], providers[i], sources[i], types[i] = c.Namespace, c.EventID, c.Provider, c.Source, c.Type
		payloads[i] = string(c.Payload)
		h, err := json.Marshal(c.Headers)
		if err != nil {
			return err
		}
		headers[i] = string(h)
		if c.SecretIndex != nil {
			v := int64(*c.SecretIndex)
			secretIdx[i] = &v
		}
		if c.ClockSkew != nil {
			v := c.ClockSkew.Milliseconds()
			skews[i] = &v
		}
		if !c.OccurredAt.IsZero() {
			t := c.OccurredAt
			occurred[i] = &t
		}
		replayed[i] = c.Replayed
		if c.BodyDigest != "" {
			digests[i] = &c.BodyDigest
		}
	}
	return InTx(ctx, b.claimer.db, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `
			INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, headers,
				secret_index, clock_skew_ms, occurred_at, replayed, body_digest)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
				$8::bigint[], $9::bigint[], $10::timestamptz[], $11::boolean[], $12::text[])
			ON CONFLICT DO NOTHING
			RETURNING namespace, event_id`,
			namespaces, eventIDs, providers, sources, types, payloads, headers, secretIdx, skews, occurred, replayed, digests)
		if err != nil {
			return fmt.Errorf("batch claim: %w", err)
		}
		inserted := map[[2]string]bool{}
		for rows.Next() {
			var k [2]string
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				rows.Close()
				return err
			}
			inserted[k] = true
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("batch claim: %w", err)
		}
		var (
			jobs    []river.InsertManyParams
			claimed []EventKey
		)
		for _, p := range batch {
			k := [2]string{p.claim.Namespace, p.claim.EventID}
			p.claimed = inserted[k]
			delete(inserted, k) // a second request for the key in this batch is a duplicate
			switch {
			case b.claimer.logOnly && !p.claimed:
				if ok, err := hasRow(ctx, tx, p.claim); err != nil {
					return err
				} else if ok {
					jobs = append(jobs, river.InsertManyParams{Args: ApplyArgs{Namespace: k[0], EventID: k[1], Force: true}})
				}
			case b.claimer.logOnly:
				jobs = append(jobs, river.InsertManyParams{Args: ApplyArgs{Namespace: k[0], EventID: k[1], Force: true}})
			case p.claimed:
				claimed = append(claimed, EventKey{Namespace: k[0], EventID: k[1]})
			}
		}
		switch {
		case len(claimed) == 1:
			jobs = append(jobs, river.InsertManyParams{Args: ApplyArgs{Namespace: claimed[0].Namespace, EventID: claimed[0].EventID}})
		case len(claimed) > 1:
			// The events claimed together are applied together.
			jobs = append(jobs, river.InsertManyParams{Args: ApplyBatchArgs{Events: claimed}})
		}
		if len(jobs) > 0 {
			if _, err := b.claimer.jobs.InsertManyTx(ctx, tx.Tx, jobs); err != nil {
				return fmt.Errorf("batch enqueue: %w", err)
			}
		}
		return nil
	})
}
