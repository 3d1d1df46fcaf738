package subscription

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// written is what writing one event's state did.
type written int

// The results of writing a state.
const (
	applied    written = iota
	stale              // the stored version was newer
	tieKept            // same version, stored precedence not lower
	tieApplied         // same version, higher precedence won
)

// writesKey stages the module's writes in an apply transaction.
type writesKey struct{}

// stage adds s to the subscription writes of tx, which run once for the
// whole batch (ledger.Staged).
func (m *module) stage(tx *ledger.Tx, s state) {
	w := ledger.Stage(tx, writesKey{}, func() *writes { return &writes{m: m} })
	w.states = append(w.states, s)
}

// writes is the subscription states a batch's events carry, in the order
// the apply ran them.
type writes struct {
	m      *module
	states []state
}

// subKey is a subscription row's unique key.
type subKey struct{ namespace, provider, externalID string }

func (s *state) key() subKey { return subKey{s.Namespace, s.Provider, s.ExternalID} }

// stored is what a locked row holds, or will once the batch is written.
type stored struct {
	id      int64 // 0: no row yet
	exists  bool  // a row, stored or about to be inserted
	version int64
	rank    int
	write   *state // the state to write; nil: the row stays as it is
}

// Flush writes every staged state that moves its subscription forward, in
// three statements for the whole batch: lock the rows, update the ones
// that exist, insert the others. The decisions are those of writing each
// state alone, in order: a state wins when its version is newer than the
// row's, or equal with a higher precedence, and the row is what the
// earlier states of the batch left, starting from its latest committed
// state (FOR UPDATE waits for a concurrent apply of the same subscription
// and then reads what it committed). So two applies at once give the same
// result, and see the same tie, in either order. Before any row, every
// subscription of the batch, stored or not, is locked by key (lockKeys):
// two applies that share subscriptions take them one after the other, in
// one order, so they cannot deadlock, and a row that does not exist yet is
// inserted by one apply while the other waits. A row inserted by a writer
// that takes no key lock is still found: its insert lost, the row is
// locked and decided again.
func (w *writes) Flush(ctx context.Context, tx *ledger.Tx) error {
	pending := w.states
	results := make([]written, 0, len(w.states))
	var done []state
	for len(pending) > 0 {
		rows, err := lockRows(ctx, tx, pending)
		if err != nil {
			return err
		}
		res := make([]written, len(pending))
		for i := range pending {
			s := &pending[i]
			row := rows[s.key()]
			tie := row.exists && row.version == s.Version
			switch {
			case !row.exists || s.Version > row.version || (tie && s.Rank > row.rank):
				res[i] = applied
				if tie {
					res[i] = tieApplied
				}
				row.exists, row.version, row.rank, row.write = true, s.Version, s.Rank, s
			case tie:
				res[i] = tieKept
			default:
				res[i] = stale
			}
		}
		lost, err := writeRows(ctx, tx, rows)
		if err != nil {
			return err
		}
		var again []state
		for i, s := range pending {
			if lost[s.key()] {
				again = append(again, s)
				continue
			}
			done, results = append(done, s), append(results, res[i])
		}
		pending = again
	}
	var refetch []river.InsertManyParams
	for i, s := range done {
		w.m.count(results[i])
		if s.refetchTie && (results[i] == tieKept || results[i] == tieApplied) {
			refetch = append(refetch, river.InsertManyParams{Args: RefetchArgs{
				Namespace: s.Namespace, SubscriptionID: s.ExternalID, Version: s.Version, EventID: s.EventID}})
		}
	}
	return tx.InsertJobs(ctx, refetch)
}

// lockRows locks the stored rows of the states' subscriptions, in key
// order, and returns one entry for every subscription, stored or not. It
// runs in the apply's transaction, whose plans reach rows by key (the
// ledger's applyPlanSQL): a cached plan costed on the small table of a new
// install cannot scan it for every batch.
func lockRows(ctx context.Context, tx *ledger.Tx, states []state) (map[subKey]*stored, error) {
	out := make(map[subKey]*stored, len(states))
	var namespaces, providers, ids []string
	for i := range states {
		k := states[i].key()
		if out[k] == nil {
			out[k] = &stored{}
			namespaces, providers, ids = append(namespaces, k.namespace), append(providers, k.provider), append(ids, k.externalID)
		}
	}
	if err := lockKeys(ctx, tx, namespaces, providers, ids); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT namespace, provider, external_id, id, version, rank FROM subscription
		WHERE (namespace, provider, external_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
		ORDER BY namespace COLLATE "C", provider COLLATE "C", external_id COLLATE "C"
		FOR UPDATE`, namespaces, providers, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %d subscription(s): %w", len(namespaces), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k  subKey
			st stored
		)
		if err := rows.Scan(&k.namespace, &k.provider, &k.externalID, &st.id, &st.version, &st.rank); err != nil {
			return nil, fmt.Errorf("lock subscriptions: %w", err)
		}
		st.exists = true
		if row := out[k]; row != nil {
			*row = st
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock subscriptions: %w", err)
	}
	return out, nil
}

// keyLockClass is the first key of the subscription module's advisory
// locks ("subs"). Advisory locks of two int keys never meet those of one
// bigint key, which River and golang-migrate take.
const keyLockClass = 0x73756273

// lockKeys takes a transaction-scoped advisory lock for every subscription
// key, stored or not, in the order of the locks' keys, which every apply
// shares: row locks alone leave new rows unguarded, and a batch that finds
// a row inserted while it waited would lock it out of order. Two keys that
// hash alike share a lock, which only makes their applies take turns.
func lockKeys(ctx context.Context, tx *ledger.Tx, namespaces, providers, ids []string) error {
	_, err := tx.ExecContext(ctx, `
		SELECT count(pg_advisory_xact_lock($4, h)) FROM (
			SELECT DISTINCT hashtext(namespace || '/' || provider || '/' || external_id) AS h
			FROM unnest($1::text[], $2::text[], $3::text[]) AS k(namespace, provider, external_id)
			ORDER BY h OFFSET 0) keys`,
		namespaces, providers, ids, keyLockClass)
	if err != nil {
		return fmt.Errorf("lock %d subscription key(s): %w", len(namespaces), err)
	}
	return nil
}

// writeRows updates the locked rows that a state won and inserts the rows
// that did not exist, one statement each, and returns the subscriptions
// whose insert lost to a concurrent apply's.
func writeRows(ctx context.Context, tx *ledger.Tx, rows map[subKey]*stored) (map[subKey]bool, error) {
	var upd, ins []*stored
	for _, row := range rows {
		switch {
		case row.write == nil:
		case row.id != 0:
			upd = append(upd, row)
		default:
			ins = append(ins, row)
		}
	}
	// Key order, as the rows were locked.
	byKey := func(a, b *stored) int {
		return cmp.Or(cmp.Compare(a.write.Namespace, b.write.Namespace), cmp.Compare(a.write.Provider, b.write.Provider),
			cmp.Compare(a.write.ExternalID, b.write.ExternalID))
	}
	slices.SortFunc(upd, byKey)
	slices.SortFunc(ins, byKey)
	if len(upd) > 0 {
		ids := make([]int64, len(upd))
		c := newColumns(len(upd))
		for i, row := range upd {
			ids[i] = row.id
			c.add(row.write)
		}
		_, err := tx.ExecContext(ctx, `
			UPDATE subscription t SET customer_id = u.customer_id, plan = u.plan, status = u.status, version = u.version,
				rank = u.rank, event_id = u.event_id, updated_at = CURRENT_TIMESTAMP
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[])
				AS u(id, customer_id, plan, status, version, rank, event_id)
			WHERE t.id = u.id`,
			ids, c.customers, c.plans, c.statuses, c.versions, c.ranks, c.events)
		if err != nil {
			return nil, fmt.Errorf("update %d subscription(s): %w", len(upd), err)
		}
	}
	if len(ins) == 0 {
		return nil, nil
	}
	var namespaces, providers, externalIDs []string
	c := newColumns(len(ins))
	for _, row := range ins {
		s := row.write
		namespaces, providers, externalIDs = append(namespaces, s.Namespace), append(providers, s.Provider), append(externalIDs, s.ExternalID)
		c.add(s)
	}
	res, err := tx.QueryContext(ctx, `
		INSERT INTO subscription (namespace, provider, external_id, customer_id, plan, status, version, rank, event_id)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[])
		ON CONFLICT (namespace, provider, external_id) DO NOTHING
		RETURNING namespace, provider, external_id`,
		namespaces, providers, externalIDs, c.customers, c.plans, c.statuses, c.versions, c.ranks, c.events)
	if err != nil {
		return nil, fmt.Errorf("insert %d subscription(s): %w", len(ins), err)
	}
	defer res.Close()
	lost := make(map[subKey]bool, len(ins))
	for _, row := range ins {
		lost[row.write.key()] = true
	}
	for res.Next() {
		var k subKey
		if err := res.Scan(&k.namespace, &k.provider, &k.externalID); err != nil {
			return nil, fmt.Errorf("insert subscriptions: %w", err)
		}
		delete(lost, k)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("insert subscriptions: %w", err)
	}
	return lost, nil
}

// columns holds the written fields of some states, a slice per column.
type columns struct {
	customers, plans, statuses, events []string
	versions, ranks                    []int64
}

func newColumns(n int) *columns {
	return &columns{
		customers: make([]string, 0, n), plans: make([]string, 0, n), statuses: make([]string, 0, n),
		events: make([]string, 0, n), versions: make([]int64, 0, n), ranks: make([]int64, 0, n),
	}
}

func (c *columns) add(s *state) {
	c.customers, c.plans, c.statuses = append(c.customers, s.CustomerID), append(c.plans, s.Plan), append(c.statuses, s.Status)
	c.events, c.versions, c.ranks = append(c.events, s.EventID), append(c.versions, s.Version), append(c.ranks, int64(s.Rank))
}
