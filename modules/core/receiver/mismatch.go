package receiver

import (
	"context"
	"crypto/sha256"
	"time"

	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Stored reads what the ledger keeps to compare a duplicate's body with;
// *ledger.Store is the one in use.
type Stored interface {
	StoredBodies(ctx context.Context, keys []ledger.EventKey) (map[ledger.EventKey]ledger.StoredBody, error)
}

// DuplicateCheck compares each duplicate the ledger answered with the body
// it stores, off the request path: a duplicate is answered at once, and a
// body that differs beyond the provider's per-attempt fields
// (provider.BodyIdentity) is counted in hookledger_duplicate_mismatch_total
// and logged as a warning. It compares digests of the identity (the row
// keeps one from its claim), never reading a stored body but a small one
// of a row claimed before digests were kept (ledger.StoredBodies). The stored body is kept either way: the first
// verified delivery is the event. Checks are batched, one query for many;
// when the queue is full (a duplicate storm outruns it) a duplicate goes
// unchecked rather than wait. Duplicates that Redis answered never reach
// the ledger and are not compared.
type DuplicateCheck struct {
	stored  Stored
	metrics *metrics.Set
	stats   *ledger.DeliveryStats
	log     *zap.Logger
	queue   chan duplicate
}

type duplicate struct {
	source   string
	key      ledger.EventKey
	provider *provider.Provider
	identity [sha256.Size]byte
}

// duplicateCheckQueue bounds the duplicates waiting to be compared, and
// duplicateCheckBatch those compared in one query.
const (
	duplicateCheckQueue = 1024
	duplicateCheckBatch = 128
)

// NewDuplicateCheck starts the comparing goroutine; it stops when ctx ends.
func NewDuplicateCheck(ctx context.Context, stored Stored, m *metrics.Set, stats *ledger.DeliveryStats, log *zap.Logger) *DuplicateCheck {
	d := &DuplicateCheck{stored: stored, metrics: m, stats: stats, log: log, queue: make(chan duplicate, duplicateCheckQueue)}
	go d.run(ctx)
	return d
}

// add queues a duplicate of source for comparison; a nil *DuplicateCheck
// compares nothing.
func (d *DuplicateCheck) add(source string, p *provider.Provider, key ledger.EventKey, identity [sha256.Size]byte) {
	if d == nil {
		return
	}
	select {
	case d.queue <- duplicate{source: source, key: key, provider: p, identity: identity}:
	default:
	}
}

func (d *DuplicateCheck) run(ctx context.Context) {
	batch := make([]duplicate, 0, duplicateCheckBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case dup := <-d.queue:
			batch = append(batch[:0], dup)
		}
	drain:
		for len(batch) < duplicateCheckBatch {
			select {
			case dup := <-d.queue:
				batch = append(batch, dup)
			default:
				break drain
			}
		}
		d.compare(ctx, batch)
	}
}

func (d *DuplicateCheck) compare(ctx context.Context, batch []duplicate) {
	keys := make([]ledger.EventKey, len(batch))
	for i, dup := range batch {
		keys[i] = dup.key
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stored, err := d.stored.StoredBodies(ctx, keys)
	if err != nil {
		d.log.Debug("duplicates left uncompared", zap.Int("duplicates", len(batch)), zap.Error(err))
		return
	}
	for _, dup := range batch {
		body, ok := stored[dup.key]
		if !ok {
			// A duplicate by body digest alone has no row of its id, nor
			// does a pruned one.
			continue
		}
		identityOf := func(b []byte) []byte { sum := dup.provider.BodyIdentity(b); return sum[:] }
		if same, known := body.Same(dup.identity[:], identityOf); same || !known {
			// An erased row has nothing to compare with, and a row under a
			// key no longer configured cannot be told.
			continue
		}
		d.metrics.DuplicateMismatches.WithLabelValues(dup.source).Inc()
		d.stats.Tally(dup.source, ledger.StatMismatch)
		d.log.Warn("duplicate delivery with a different body: the stored body is kept",
			zap.String("source", dup.source), zap.String("namespace", dup.key.Namespace), zap.String("event_id", dup.key.EventID))
	}
}
