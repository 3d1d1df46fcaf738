package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strings"
)

// Write is a module's write to one of its tables, staged by its handlers
// and made once per apply transaction: a handler Puts a value under the
// key of the business row it changes; the apply folds the values of one
// key with the module's Merge, in the order it applied their events, and
// when the last handler of the transaction is done it hands every key and
// its value to the module's Flush, sorted by key, in one call, which can
// be one statement for the whole batch (INSERT ... SELECT FROM unnest).
// Until then the handlers see nothing of it in the database: a handler
// reads what its transaction put for a key with Get.
//
// The order rows are locked in is the apply's business, not the module's:
// before the first Flush of a transaction, the apply takes a
// transaction-scoped lock on every key of every Write, in one order every
// transaction shares, rows that do not exist yet included. Two applies
// that meet over business rows then take turns instead of deadlocking,
// whatever order their events came in and whatever plan a module's
// statement gets. A module's statements run with PostgreSQL's default
// planner settings.
//
// Make a Write once, in the module's Register, with NewWrite.
type Write[K comparable, V any] struct {
	fns WriteFuncs[K, V]
	// name is "payment.Flush", after the module that registered it: the
	// write's failures are reported as its handler's.
	name string
	rank int
	// salt is the key type's name, which the keys' locks hash with the
	// key.
	salt  string
	codec *keyCodec
}

// WriteFuncs is what a module writes for a Write: its merge rule and its
// statements. K is the business row's unique key: a string, an integer,
// a bool, or a struct of them (keys sort field by field, strings by
// bytes). V is what the handlers stage for a row.
type WriteFuncs[K comparable, V any] struct {
	// Merge folds a newer value of a key into the older one and returns
	// the value to keep. It is called once for every value of a key after
	// its first (or after its stored value, with Load), in the order the
	// events were applied, so it may count what it decides.
	Merge func(older, newer V) V
	// Flush writes the transaction's values, sorted by key, each key once.
	Flush func(ctx context.Context, tx *Tx, entries []Entry[K, V]) error
	// Load, when set, reads the stored values of keys (sorted) that have
	// one, before the fold: each key's fold then starts from its stored
	// value, so that Merge decides every event against the row as the
	// events before it left it, as if each were written alone. Keys
	// without a stored value start from their first value. A module whose
	// statement merges with the stored row itself (GREATEST, a guarded
	// upsert) needs none.
	Load func(ctx context.Context, tx *Tx, keys []K) ([]Entry[K, V], error)
}

// Entry is a key and its value.
type Entry[K comparable, V any] struct {
	Key   K
	Value V
}

// NewWrite registers a module's Write. Its Flush runs after those of the
// Writes registered before it. A key type NewWrite cannot order, or a
// missing Merge or Flush, makes NewRiver fail, so the process does not
// start.
func NewWrite[K comparable, V any](reg *Registry, fns WriteFuncs[K, V]) *Write[K, V] {
	var name string
	if fns.Flush != nil {
		module, _ := funcName(fns.Flush)
		name = module + ".Flush"
	}
	return newWrite(reg, fns, name)
}

// newWrite registers a Write whose failures are named name.
func newWrite[K comparable, V any](reg *Registry, fns WriteFuncs[K, V], name string) *Write[K, V] {
	kt := reflect.TypeFor[K]()
	w := &Write[K, V]{fns: fns, rank: len(reg.writes), salt: kt.String(), name: name}
	if kt.Name() != "" {
		w.salt = kt.PkgPath() + "." + kt.Name()
	}
	codec, err := newKeyCodec(kt)
	switch {
	case err != nil:
		reg.errs = append(reg.errs, fmt.Errorf("write %s: %w", w.name, err))
	case fns.Merge == nil || fns.Flush == nil:
		reg.errs = append(reg.errs, fmt.Errorf("write of %s keys: Merge and Flush are required", kt))
	}
	w.codec = codec
	reg.writes = append(reg.writes, w.name)
	return w
}

// Put stages value for key in tx's apply, folded with what the
// transaction's earlier events put for key (Merge).
func (w *Write[K, V]) Put(tx *Tx, key K, value V) {
	b := batchOf(tx, w)
	i, ok := b.index[key]
	if !ok {
		b.index[key] = len(b.slots)
		b.slots = append(b.slots, slot[K, V]{key: key, value: value})
		return
	}
	s := &b.slots[i]
	if w.fns.Load != nil {
		// Folded when the stored value is known.
		s.later = append(s.later, value)
		return
	}
	s.value = w.fns.Merge(s.value, value)
}

// Get returns what tx's apply has put for key so far: the fold of its
// values without the stored one (with Load, the newest value put).
func (w *Write[K, V]) Get(tx *Tx, key K) (V, bool) {
	var (
		i  int
		ok bool
		b  *writeBatch[K, V]
	)
	if found := tx.writes.batchOf(w); found != nil {
		b = found.(*writeBatch[K, V])
		i, ok = b.index[key]
	}
	if !ok {
		var zero V
		return zero, false
	}
	s := &b.slots[i]
	if n := len(s.later); n > 0 {
		return s.later[n-1], true
	}
	return s.value, true
}

// pendingWrites is what the handlers of one transaction put in Writes, one
// batch per Write, until the transaction writes them (flushWrites): the
// apply after its last handler, InTx and InTxWithJobs before they commit.
type pendingWrites struct {
	batches []batch
}

// batch is one Write's values in a transaction.
type batch interface {
	owner() any
	// name is the Write's name, "module.Flush".
	name() string
	order() int
	// prepare sorts the batch's keys and appends their locks to locks.
	prepare(locks []int32) []int32
	// write folds the values (with the stored ones, when the Write loads
	// them) and runs the Write's Flush.
	write(ctx context.Context, tx *Tx) error
}

// batchOf returns w's batch in p, or nil.
func (p *pendingWrites) batchOf(w any) batch {
	if p == nil {
		return nil
	}
	for _, b := range p.batches {
		if b.owner() == w {
			return b
		}
	}
	return nil
}

// batchOf returns w's batch in tx, made on w's first Put.
func batchOf[K comparable, V any](tx *Tx, w *Write[K, V]) *writeBatch[K, V] {
	if tx.writes == nil {
		tx.writes = &pendingWrites{}
	}
	if b := tx.writes.batchOf(w); b != nil {
		return b.(*writeBatch[K, V])
	}
	b := &writeBatch[K, V]{w: w, index: map[K]int{}}
	tx.writes.batches = append(tx.writes.batches, b)
	return b
}

// flushWrites writes tx's Writes and forgets them: it locks the keys of
// all of them in one statement, in the order of the locks' keys, then runs
// each Write's Flush in the order the Writes were registered. A Write's
// failure is named after it (HandlerError), once.
func flushWrites(ctx context.Context, tx *Tx) error {
	if tx.writes == nil {
		return nil
	}
	batches := tx.writes.batches
	tx.writes = nil
	slices.SortStableFunc(batches, func(a, b batch) int { return a.order() - b.order() })
	var (
		locks []int32
		names []string
	)
	for _, b := range batches {
		locks = b.prepare(locks)
		names = append(names, b.name())
	}
	tx.flushing.Store(new(strings.Join(names, ", ")))
	if err := lockWriteKeys(ctx, tx, locks); err != nil {
		return err
	}
	for _, b := range batches {
		tx.flushing.Store(new(b.name()))
		if err := b.write(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// writeLockClass is the first key of the Writes' advisory locks ("hlwk").
// Advisory locks of two int keys never meet those of one bigint key, which
// River and golang-migrate take.
const writeLockClass = 0x686c776b

// lockWriteKeys takes a transaction-scoped advisory lock for every key of
// the transaction's Writes, stored or not, in the order of the locks'
// keys, which every transaction shares: row locks alone leave rows that
// do not exist yet unguarded, and follow the plan a statement gets. Two
// keys whose locks hash alike share a lock, which only makes their applies
// take turns. In an apply it then sets the writes' lock timeout
// (ApplyLockTimeout).
func lockWriteKeys(ctx context.Context, tx *Tx, locks []int32) error {
	if len(locks) == 0 {
		return nil
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	var err error
	if tx.writeLockTimeout == "" {
		_, err = tx.ExecContext(ctx, `
			SELECT count(pg_advisory_xact_lock($1, k.h)) FROM (SELECT h FROM unnest($2::int4[]) AS h ORDER BY h OFFSET 0) k`,
			writeLockClass, locks)
	} else {
		// The writes' lock timeout is set once every key's lock is held:
		// the aggregate takes them all before the outer row is made.
		_, err = tx.ExecContext(ctx, `
			SELECT set_config('lock_timeout', $3, true) FROM (
				SELECT count(pg_advisory_xact_lock($1, k.h)) FROM (SELECT h FROM unnest($2::int4[]) AS h ORDER BY h OFFSET 0) k) locked`,
			writeLockClass, locks, tx.writeLockTimeout)
	}
	if err != nil {
		return &dbError{fmt.Errorf("lock %d staged key(s): %w", len(locks), err)}
	}
	return nil
}

// writeBatch is a Write's values in one transaction, one slot per key in
// the order the keys were first put.
type writeBatch[K comparable, V any] struct {
	w     *Write[K, V]
	index map[K]int
	slots []slot[K, V]
	// sorted is the slots' order by key, from prepare.
	sorted []int
}

// slot is one key's values: its fold so far, or, when the Write loads
// stored values, its first value and the later ones in order.
type slot[K comparable, V any] struct {
	key   K
	value V
	later []V
	enc   []byte
}

func (b *writeBatch[K, V]) owner() any   { return b.w }
func (b *writeBatch[K, V]) name() string { return b.w.name }
func (b *writeBatch[K, V]) order() int   { return b.w.rank }

func (b *writeBatch[K, V]) prepare(locks []int32) []int32 {
	b.sorted = make([]int, len(b.slots))
	for i := range b.slots {
		s := &b.slots[i]
		s.enc = b.w.codec.encode(s.key)
		b.sorted[i] = i
		h := fnv.New32a()
		h.Write([]byte(b.w.salt))
		h.Write([]byte{0})
		h.Write(s.enc)
		locks = append(locks, int32(h.Sum32()))
	}
	slices.SortFunc(b.sorted, func(i, j int) int { return bytes.Compare(b.slots[i].enc, b.slots[j].enc) })
	return locks
}

// write loads, merges and flushes the batch. A panic in the module's Load,
// Merge or Flush is its failure, named after it as an error would be.
func (b *writeBatch[K, V]) write(ctx context.Context, tx *Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &HandlerError{Handler: b.w.name, Err: &PanicError{Value: v, Stack: stack()}}
		}
	}()
	fns := b.w.fns
	entries := make([]Entry[K, V], len(b.sorted))
	if fns.Load == nil {
		for n, i := range b.sorted {
			entries[n] = Entry[K, V]{Key: b.slots[i].key, Value: b.slots[i].value}
		}
	} else {
		keys := make([]K, len(b.sorted))
		for n, i := range b.sorted {
			keys[n] = b.slots[i].key
		}
		stored, err := fns.Load(ctx, tx, keys)
		if err != nil {
			return &HandlerError{Handler: b.w.name, Err: fmt.Errorf("load %d stored row(s): %w", len(keys), err)}
		}
		loaded := make(map[K]V, len(stored))
		for _, e := range stored {
			loaded[e.Key] = e.Value
		}
		for n, i := range b.sorted {
			s := &b.slots[i]
			v := s.value
			if old, ok := loaded[s.key]; ok {
				v = fns.Merge(old, v)
			}
			for _, later := range s.later {
				v = fns.Merge(v, later)
			}
			entries[n] = Entry[K, V]{Key: s.key, Value: v}
		}
	}
	if err := fns.Flush(ctx, tx, entries); err != nil {
		return &HandlerError{Handler: b.w.name, Err: err}
	}
	return nil
}

// keyCodec encodes keys of one type as bytes whose order is the keys'
// order, field by field: the order Writes sort keys in, and what their
// locks hash.
type keyCodec struct {
	parts []keyPart
}

type keyPart struct {
	index []int // of the field in the key; nil for a key that is not a struct
	kind  reflect.Kind
}

func newKeyCodec(t reflect.Type) (*keyCodec, error) {
	c := &keyCodec{}
	if err := c.add(t, nil); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *keyCodec) add(t reflect.Type, at []int) error {
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		c.parts = append(c.parts, keyPart{index: at, kind: t.Kind()})
		return nil
	case reflect.Struct:
		for i := range t.NumField() {
			if err := c.add(t.Field(i).Type, append(append([]int(nil), at...), i)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("a key of type %s cannot be ordered: use strings, integers, bools or a struct of them", t)
}

// encode appends each part of k: a string with its zero bytes escaped and
// a terminator, so that a prefix sorts first; an integer big-endian with
// its sign flipped.
func (c *keyCodec) encode(k any) []byte {
	v := reflect.ValueOf(k)
	var out []byte
	for _, p := range c.parts {
		f := v
		if p.index != nil {
			f = v.FieldByIndex(p.index)
		}
		switch {
		case p.kind == reflect.String:
			for _, b := range []byte(f.String()) {
				out = append(out, b)
				if b == 0 {
					out = append(out, 0xff)
				}
			}
			out = append(out, 0, 0)
		case p.kind == reflect.Bool:
			if f.Bool() {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		case f.CanInt():
			out = binary.BigEndian.AppendUint64(out, uint64(f.Int())^(1<<63))
		default:
			out = binary.BigEndian.AppendUint64(out, f.Uint())
		}
	}
	return out
}
