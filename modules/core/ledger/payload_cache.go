package ledger

import (
	"sync"
	"time"
)

// Payloads keeps the payloads this process claimed, from the claim's
// commit until the apply of the event takes them, so that the apply does
// not read them back from the ledger. Reading a payload back costs
// PostgreSQL its TOAST lookup and decompression and sends the whole body
// over the connection again, for bytes the process held a moment before.
//
// An entry is exactly the stored payload: the claim adds the body of a
// delivery it inserted, only after its transaction committed, and the
// ledger never changes a payload. The apply takes an entry (it is gone
// whether the apply commits or not), so a retry, a requeue or an apply in
// another process reads the ledger, as without it. Entries are kept
// oldest first within a budget of bytes and an age: a claim whose apply
// runs elsewhere (another process, role=http) only ages out.
//
// A nil *Payloads keeps nothing.
type Payloads struct {
	maxBytes int
	maxAge   time.Duration

	mu    sync.Mutex
	byKey map[EventKey]payloadEntry
	// order holds the entries oldest first from head, and those taken
	// since (their seq no longer in byKey), until they reach the head.
	order []payloadRef
	head  int
	bytes int
	seq   uint64
}

type payloadEntry struct {
	payload []byte
	seq     uint64
}

type payloadRef struct {
	key   EventKey
	seq   uint64
	size  int
	added time.Time
}

// PayloadsBytes and PayloadsAge bound what a process keeps: at 5,000
// claims a second of 7 KB events, an apply that lags by a second holds
// 35 MB. An apply that lags by more than PayloadsAge is working through a
// backlog and reads the ledger. When claims stop, what they kept stays
// until the next claim or apply, at most PayloadsBytes.
const (
	PayloadsBytes = 32 << 20
	PayloadsAge   = 10 * time.Second
)

// NewPayloads keeps up to maxBytes of payloads, each for up to maxAge.
func NewPayloads(maxBytes int, maxAge time.Duration) *Payloads {
	return &Payloads{maxBytes: maxBytes, maxAge: maxAge, byKey: map[EventKey]payloadEntry{}}
}

// put keeps payload as k's, dropping the oldest entries that are past
// the age or leave no room. A payload larger than the budget is not kept.
func (p *Payloads) put(k EventKey, payload []byte, now time.Time) {
	size := cap(payload)
	if p == nil || size > p.maxBytes {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evict(now, size)
	if e, ok := p.byKey[k]; ok {
		// A key claimed again (a row pruned and claimed anew): the new
		// payload is the stored one.
		p.bytes -= cap(e.payload)
	}
	p.seq++
	p.byKey[k] = payloadEntry{payload: payload, seq: p.seq}
	p.order = append(p.order, payloadRef{key: k, seq: p.seq, size: size, added: now})
	p.bytes += size
}

// evict drops, oldest first, the entries past the age and those that
// leave less than room bytes, and forgets taken ones. order then holds
// at most twice the kept entries, and its array shrinks with them.
func (p *Payloads) evict(now time.Time, room int) {
	for p.head < len(p.order) {
		old := p.order[p.head]
		if p.live(old) {
			if p.bytes+room <= p.maxBytes && now.Sub(old.added) < p.maxAge {
				break
			}
			delete(p.byKey, old.key)
			p.bytes -= old.size
		}
		p.order[p.head] = payloadRef{}
		p.head++
	}
	// Taken entries behind a kept one: keep the kept ones alone, in a
	// new array when the old one is far larger than they need.
	if n := len(p.order) - p.head; n > 2*len(p.byKey)+64 || p.head > n {
		kept := p.order[:0]
		if cap(p.order) > 4*len(p.byKey)+256 {
			kept = make([]payloadRef, 0, 2*len(p.byKey)+64)
		}
		for _, r := range p.order[p.head:] {
			if p.live(r) {
				kept = append(kept, r)
			}
		}
		clear(p.order[len(kept):])
		p.order, p.head = kept, 0
	}
}

// live reports whether r is still kept: not taken, not replaced.
func (p *Payloads) live(r payloadRef) bool {
	e, ok := p.byKey[r.key]
	return ok && e.seq == r.seq
}

// take removes and returns k's payload, if kept and not past the age.
func (p *Payloads) take(k EventKey, now time.Time) ([]byte, bool) {
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evict(now, 0)
	e, ok := p.byKey[k]
	if !ok {
		return nil, false
	}
	delete(p.byKey, k)
	p.bytes -= cap(e.payload)
	return e.payload, true
}

// takeAll takes the entries of keys, by key; nil when it holds none.
func (p *Payloads) takeAll(keys []EventKey) map[EventKey][]byte {
	var kept map[EventKey][]byte
	now := time.Now()
	for _, k := range keys {
		if payload, ok := p.take(k, now); ok {
			if kept == nil {
				kept = make(map[EventKey][]byte, len(keys))
			}
			kept[k] = payload
		}
	}
	return kept
}
