package subscription

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// subKey is a subscription row's unique key.
type subKey struct {
	Namespace  string `col:"namespace"`
	Provider   string `col:"provider"`
	ExternalID string `col:"external_id"`
}

// state is one version of a subscription: an event's, ready to be
// written, or the stored row's.
type state struct {
	CustomerID string
	Plan       string
	Status     string
	Version    int64
	Rank       int
	EventID    string
	// stored marks the row's state as loaded (loadStates): kept, it is not
	// written again.
	stored bool
	// refetchTie asks for a re-fetch job when this state ties the one
	// before it.
	refetchTie bool
	// refetch are the re-fetch jobs of the ties met so far.
	refetch []RefetchArgs
}

// written is what merging one event's state did.
type written int

// The results of merging a state.
const (
	applied    written = iota
	stale              // the version before was newer
	tieKept            // same version, precedence before not lower
	tieApplied         // same version, higher precedence won
)

// merge decides an event's state against the subscription as the events
// before it left it (the stored row first, loadStates): the newer state
// wins when its version is newer, or equal with a higher precedence. It
// counts stale events and ties, and keeps the re-fetch job of every tie
// of a state that asks for one.
func (m *module) merge(older, newer state) state {
	tie := newer.Version == older.Version
	var (
		kept = older
		w    = stale
	)
	switch {
	case newer.Version > older.Version || (tie && newer.Rank > older.Rank):
		kept, w = newer, applied
		if tie {
			w = tieApplied
		}
	case tie:
		w = tieKept
	}
	m.count(w)
	kept.refetch = older.refetch
	if tie && newer.refetchTie {
		kept.refetch = append(append([]RefetchArgs(nil), older.refetch...), RefetchArgs{Version: newer.Version, EventID: newer.EventID})
	}
	return kept
}

// loadStates reads and locks the stored rows of keys.
func loadStates(ctx context.Context, tx *ledger.Tx, keys []subKey) ([]ledger.Entry[subKey, state], error) {
	from, args := ledger.Unnest(keys, 1)
	// A probe of the unique index per key, whatever the table's size and
	// statistics: the planner may not join the keys to the table another
	// way.
	rows, err := tx.QueryContext(ctx, `
		SELECT s.namespace, s.provider, s.external_id, s.version, s.rank
		FROM `+from+`
		CROSS JOIN LATERAL (SELECT * FROM subscription t
			WHERE t.namespace = k.namespace AND t.provider = k.provider AND t.external_id = k.external_id FOR UPDATE) s`, args...)
	if err != nil {
		return nil, fmt.Errorf("read %d subscription(s): %w", len(keys), err)
	}
	defer rows.Close()
	var out []ledger.Entry[subKey, state]
	for rows.Next() {
		e := ledger.Entry[subKey, state]{Value: state{stored: true}}
		if err := rows.Scan(&e.Key.Namespace, &e.Key.Provider, &e.Key.ExternalID, &e.Value.Version, &e.Value.Rank); err != nil {
			return nil, fmt.Errorf("read subscriptions: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	return out, nil
}

// subRow is a subscription as flushStates writes its row.
type subRow struct {
	Namespace  string `col:"namespace"`
	Provider   string `col:"provider"`
	ExternalID string `col:"external_id"`
	CustomerID string `col:"customer_id"`
	Plan       string `col:"plan"`
	Status     string `col:"status"`
	Version    int64  `col:"version"`
	Rank       int    `col:"rank"`
	EventID    string `col:"event_id"`
}

// flushStates writes every subscription whose state an event of the batch
// moved forward, in one statement, and inserts the re-fetch jobs of the
// ties. Each row's state was decided as if its events were written one by
// one, in the order the apply ran them (merge), from the stored row; the
// statement keeps the same guard, so a row is never moved back. A
// customer erase recorded (erased_subject) is written redacted: an
// event of an erased customer does not write the customer back.
func flushStates(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[subKey, state]) error {
	var (
		subs    []subRow
		refetch []river.InsertManyParams
	)
	for _, e := range entries {
		k, s := e.Key, e.Value
		for _, r := range s.refetch {
			r.Namespace, r.SubscriptionID = k.Namespace, k.ExternalID
			refetch = append(refetch, river.InsertManyParams{Args: r})
		}
		if s.stored {
			continue
		}
		subs = append(subs, subRow{
			Namespace: k.Namespace, Provider: k.Provider, ExternalID: k.ExternalID, CustomerID: s.CustomerID,
			Plan: s.Plan, Status: s.Status, Version: s.Version, Rank: s.Rank, EventID: s.EventID,
		})
	}
	if len(subs) > 0 {
		from, args := ledger.Unnest(subs, 1)
		_, err := tx.ExecContext(ctx, `
			INSERT INTO subscription AS t (namespace, provider, external_id, customer_id, plan, status, version, rank, event_id)
			SELECT k.namespace, k.provider, k.external_id, `+ledger.RedactErasedSQL("k.namespace", "k.customer_id")+`,
				k.plan, k.status, k.version, k.rank, k.event_id
			FROM `+from+`
			ON CONFLICT (namespace, provider, external_id) DO UPDATE
			SET customer_id = EXCLUDED.customer_id, plan = EXCLUDED.plan, status = EXCLUDED.status, version = EXCLUDED.version,
				rank = EXCLUDED.rank, event_id = EXCLUDED.event_id, updated_at = CURRENT_TIMESTAMP
			WHERE (t.version, t.rank) < (EXCLUDED.version, EXCLUDED.rank)`, args...)
		if err != nil {
			return fmt.Errorf("write %d subscription(s): %w", len(subs), err)
		}
	}
	return tx.InsertJobs(ctx, refetch)
}
