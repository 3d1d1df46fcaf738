package receiver

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// errOverBudget is returned when the server already holds as many body
	// bytes as its budget allows a delivery of this kind.
	errOverBudget = errors.New("request-body budget exhausted")
	// errClientOverBudget is returned when one client address already holds
	// its share of the budget.
	errClientOverBudget = errors.New("request-body budget of this client address exhausted")
	// errSourceOverBudget is returned when one source's deliveries already
	// hold its share of the budget.
	errSourceOverBudget = errors.New("request-body budget of this source exhausted")
)

const (
	// clientShare is the part of the budget one client address may hold
	// (never less than one body of the largest limit).
	clientShare = 4
	// smallBody is the largest body the small slice is kept for: nearly
	// every Stripe, Slack and Paddle delivery is smaller.
	smallBody = 64 << 10
	// sliceShare is the part of the budget kept for small bodies, and the
	// part kept for clients in their source's allow_ips.
	sliceShare = 8
)

// pool is one part of the budget.
type pool int

const (
	// poolOpen is for any delivery, each source holding at most its share.
	poolOpen pool = iota
	// poolSmall is kept for bodies of at most smallBody, divided equally
	// among the sources.
	poolSmall
	// poolTrusted is kept for deliveries from a client in its source's
	// allow_ips (the provider's published addresses, or the operator's).
	poolTrusted
	pools
)

// budgetSource is what the budget knows of a source.
type budgetSource struct {
	name  string
	limit int64
	// trusted says the source has an allow_ips: every client that reaches
	// its body is in it.
	trusted bool
}

// budget bounds the body bytes that in-flight deliveries hold, and divides
// them so that one source's slow or large bodies cannot starve another's
// deliveries. A delivery reserves its bytes in chunks as they arrive
// (never its declared length up front) and releases them when it is
// answered; a chunk that fits nowhere it may go is refused at once (503).
// Each chunk comes from the first part of the budget the delivery may use
// and that has room:
//
//   - the trusted slice (an eighth, when any source has allow_ips), for
//     clients in their source's allow_ips: they are served first;
//   - the small slice (an eighth), for bodies that declare at most 64 KiB,
//     divided equally among the sources, so that every source keeps room
//     for its small deliveries whatever the others hold;
//   - the open rest, of which one source holds at most half (or one body
//     of its limit, when that is more; all of it when it is the only
//     source).
//
// Across all of them one client address (an IPv6 client's /64) holds at
// most a quarter of the budget, never less than one body of the largest
// limit. The open rest always holds one body of the largest limit.
type budget struct {
	mu             sync.Mutex
	size           [pools]int64
	perClient      int64
	smallPerSource int64
	openPerSource  map[string]int64
	used           [pools]int64
	byClient       map[string]int64
	bySource       [pools]map[string]int64
	gauge          prometheus.Gauge
}

func newBudget(total int64, sources []budgetSource, gauge prometheus.Gauge) *budget {
	largest, trusted := int64(0), false
	for _, s := range sources {
		largest = max(largest, s.limit)
		trusted = trusted || s.trusted
	}
	if total <= 0 {
		total = largest
	}
	b := &budget{
		perClient:     min(total, max(largest, total/clientShare)),
		openPerSource: map[string]int64{},
		byClient:      map[string]int64{},
		gauge:         gauge,
	}
	for p := range pools {
		b.bySource[p] = map[string]int64{}
	}
	b.size[poolSmall] = total / sliceShare
	if trusted {
		b.size[poolTrusted] = total / sliceShare
	}
	b.size[poolOpen] = total - b.size[poolSmall] - b.size[poolTrusted]
	if b.size[poolOpen] < min(total, largest) {
		b.size[poolOpen] = min(total, largest)
		rest := total - b.size[poolOpen]
		b.size[poolSmall] = rest
		if trusted {
			b.size[poolSmall] = rest / 2
			b.size[poolTrusted] = rest - rest/2
		}
	}
	b.smallPerSource = b.size[poolSmall] / int64(max(1, len(sources)))
	for _, s := range sources {
		share := b.size[poolOpen]
		if len(sources) > 1 {
			share = max(min(s.limit, share), share/2)
		}
		b.openPerSource[s.name] = share
	}
	return b
}

// hold is what one delivery holds of the budget.
type hold struct {
	budget *budget
	client string
	source string
	// small: the body declared at most smallBody; trusted: its client is
	// in its source's allow_ips.
	small, trusted bool
	taken          [pools]int64
	n              int64
}

// grow reserves n more bytes for h.
func (h *hold) grow(n int64) error {
	if n == 0 {
		return nil
	}
	b := h.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byClient[h.client]+n > b.perClient {
		return errClientOverBudget
	}
	p, err := b.pick(h, n)
	if err != nil {
		return err
	}
	b.used[p] += n
	b.bySource[p][h.source] += n
	b.byClient[h.client] += n
	h.taken[p] += n
	h.n += n
	b.setGauge()
	return nil
}

// pick is the part of the budget h's next n bytes come from.
func (b *budget) pick(h *hold, n int64) (pool, error) {
	if h.trusted && b.used[poolTrusted]+n <= b.size[poolTrusted] {
		return poolTrusted, nil
	}
	if h.small && b.used[poolSmall]+n <= b.size[poolSmall] && b.bySource[poolSmall][h.source]+n <= b.smallPerSource {
		return poolSmall, nil
	}
	if b.used[poolOpen]+n > b.size[poolOpen] {
		return 0, errOverBudget
	}
	share, ok := b.openPerSource[h.source]
	if !ok {
		share = b.size[poolOpen] / 2
	}
	if b.bySource[poolOpen][h.source]+n > share {
		return 0, errSourceOverBudget
	}
	return poolOpen, nil
}

// release gives back everything h holds.
func (h *hold) release() {
	if h.n == 0 {
		return
	}
	b := h.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	for p := range pools {
		b.used[p] -= h.taken[p]
		if b.bySource[p][h.source] -= h.taken[p]; b.bySource[p][h.source] <= 0 {
			delete(b.bySource[p], h.source)
		}
		h.taken[p] = 0
	}
	if b.byClient[h.client] -= h.n; b.byClient[h.client] <= 0 {
		delete(b.byClient, h.client)
	}
	h.n = 0
	b.setGauge()
}

// inUse is the budget held, in all its parts.
func (b *budget) inUse() int64 {
	var n int64
	for p := range pools {
		n += b.used[p]
	}
	return n
}

func (b *budget) setGauge() {
	if b.gauge != nil {
		b.gauge.Set(float64(b.inUse()))
	}
}

// clientKey is what the per-client share is counted under: the client
// address, and for IPv6 its /64, which one client usually holds whole.
func clientKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}
