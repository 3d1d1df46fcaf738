package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestListPagesThroughABoundedScan: a filter without an index of its own
// is matched among ledger.ListScanLimit rows per page, so a rare one
// makes short pages, empty ones among them, with a cursor that goes on;
// paging to the end still yields every match once, newest first (by
// received_at, ties by id), as an indexed filter does in full pages.
func TestListPagesThroughABoundedScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	const rows = 3*ledger.ListScanLimit + 500
	// Rows received newest last, but for every 1000th, which shares the
	// received_at of its neighbour: a tie the order breaks by id. Every
	// 3001st comes from the rare source; every 1000th failed.
	_, err := db.SQL.ExecContext(ctx, `
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		SELECT 'stripe', 'evt_list_' || lpad(g::text, 6, '0'), 'stripe',
			CASE WHEN g % 3001 = 0 THEN 'rare' ELSE 'stripe' END, 'invoice.paid', '{}',
			CASE WHEN g % 1000 = 0 THEN 'failed' ELSE 'settled' END,
			now() - interval '1 day' + (g - CASE WHEN g % 1000 = 0 THEN 1 ELSE 0 END) * interval '1 second'
		FROM generate_series(1, $1::int) g`, rows)
	require.NoError(t, err)
	_, err = db.SQL.ExecContext(ctx, `ANALYZE webhook_event`)
	require.NoError(t, err)
	store := ledger.NewStore(db.SQL, nil, ledger.StoreOptions{})

	all := func(f ledger.Filter) (ids []string, pages, short int) {
		t.Helper()
		for {
			page, next, err := store.List(ctx, f)
			require.NoError(t, err)
			for _, r := range page {
				ids = append(ids, r.EventID)
				require.Empty(t, r.Payload, "lists leave the payload out")
			}
			pages++
			if next == 0 {
				return ids, pages, short
			}
			if len(page) < f.Limit {
				short++
			}
			require.Less(t, pages, rows, "the cursor goes on")
			f.After = next
		}
	}
	want := func(q string, args ...any) []string {
		t.Helper()
		var ids []string
		r, err := db.SQL.QueryContext(ctx, `SELECT event_id FROM webhook_event WHERE `+q+` ORDER BY received_at DESC, id DESC`, args...)
		require.NoError(t, err)
		defer r.Close()
		for r.Next() {
			var id string
			require.NoError(t, r.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, r.Err())
		return ids
	}

	ids, _, short := all(ledger.Filter{Source: "rare", Limit: 50})
	require.Equal(t, want(`source = 'rare'`), ids)
	require.Len(t, ids, rows/3001)
	require.Positive(t, short, "short pages before the last, each read a bounded scan")

	ids, pages, short := all(ledger.Filter{Status: webhookevent.StatusFailed, Limit: 7})
	require.Equal(t, want(`status = 'failed'`), ids, "an indexed status, ties at the same received_at included")
	require.Zero(t, short, "an indexed filter fills every page")
	require.Equal(t, (len(ids)+6)/7, pages)

	since := time.Now().Add(-23 * time.Hour) // one instant for both sides
	ids, _, _ = all(ledger.Filter{Type: "invoice.*", Since: since, Limit: 500})
	require.Equal(t, want(`event_type LIKE 'invoice.%' AND received_at >= $1`, since), ids)

	none, next, err := store.List(ctx, ledger.Filter{Type: "no.such.type", Limit: 50})
	require.NoError(t, err)
	require.Empty(t, none)
	require.NotZero(t, next, "a page that found nothing among its rows says where to go on")
}

// TestFindAndSearchIDsInEveryNamespace: an id without its namespace is
// found in any namespace (ambiguous when several hold it), and a prefix
// lists the ids that start with it, in every namespace, at most as many
// as asked.
func TestFindAndSearchIDsInEveryNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	_, err := db.SQL.ExecContext(ctx, `
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		SELECT ns, 'evt_' || ns || '_' || g, 'stripe', 'stripe', 'invoice.paid', '{}'
		FROM unnest(ARRAY['acct_a', 'acct_b', 'stripe']) ns, generate_series(1, 300) g;
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		VALUES ('acct_a', 'evt_shared', 'stripe', 'stripe', 'invoice.paid', '{}'), ('acct_b', 'evt_shared', 'stripe', 'stripe', 'invoice.paid', '{}')`)
	require.NoError(t, err)
	store := ledger.NewStore(db.SQL, nil, ledger.StoreOptions{})

	r, err := store.Find(ctx, "", "evt_acct_b_7")
	require.NoError(t, err)
	require.Equal(t, "acct_b", r.Namespace)
	_, err = store.Find(ctx, "", "evt_shared")
	require.ErrorIs(t, err, ledger.ErrAmbiguous)
	r, err = store.Find(ctx, "acct_a", "evt_shared")
	require.NoError(t, err)
	require.Equal(t, "acct_a", r.Namespace)
	_, err = store.Find(ctx, "", "evt_nowhere")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	found, err := store.Search(ctx, "evt_stripe_2", 50)
	require.NoError(t, err)
	require.Len(t, found, 50, "at most as many as asked")
	for _, r := range found {
		require.Equal(t, "stripe", r.Namespace)
		require.Regexp(t, `^evt_stripe_2`, r.EventID)
	}
	found, err = store.Search(ctx, "evt_acct_b_29", 50)
	require.NoError(t, err)
	var ids []string
	for _, r := range found {
		ids = append(ids, r.EventID)
	}
	require.Equal(t, []string{"evt_acct_b_29", "evt_acct_b_290", "evt_acct_b_291", "evt_acct_b_292", "evt_acct_b_293",
		"evt_acct_b_294", "evt_acct_b_295", "evt_acct_b_296", "evt_acct_b_297", "evt_acct_b_298", "evt_acct_b_299"}, ids)
	found, err = store.Search(ctx, "evt_shar", 50)
	require.NoError(t, err)
	require.Len(t, found, 2, "in every namespace")
	found, err = store.Search(ctx, "nothing", 50)
	require.NoError(t, err)
	require.Empty(t, found)
}
