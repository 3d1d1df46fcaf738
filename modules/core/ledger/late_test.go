package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestBatcherReportsAClaimThatCommitsAfterItsRequestGaveUp: a request that
// stopped waiting (the receiver answered 503) while its batch went on to
// commit is told to LateClaim, so counts of claims match the ledger's
// rows; a request that got its answer is not.
func TestBatcherReportsAClaimThatCommitsAfterItsRequestGaveUp(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	b := ledger.NewBatcher(ctx, h.Claimer, 1, 256)
	late := make(chan ledger.Claim, 2)
	b.LateClaim = func(c ledger.Claim) { late <- c }

	// Another transaction's uncommitted row of the same key holds the
	// claim's insert until it ends.
	hold, err := h.DB.SQL.Begin()
	require.NoError(t, err)
	_, err = hold.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		VALUES ('stripe', 'evt_late', 'stripe', 'stripe', 'invoice.paid', '{}')`)
	require.NoError(t, err)

	reqCtx, giveUp := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() {
		_, err := b.Claim(reqCtx, claimOf("evt_late", "invoice.paid"))
		answered <- err
	}()
	waitLockWaiter(t, h)
	giveUp()
	require.ErrorIs(t, <-answered, context.Canceled, "the request stopped waiting")
	require.NoError(t, hold.Rollback())

	c := <-late
	require.Equal(t, "evt_late", c.EventID)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_late' AND payload <> '{}'`), "the late claim is the row")

	res, err := b.Claim(context.Background(), claimOf("evt_on_time", "invoice.paid"))
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	require.Empty(t, late, "a claim answered in time is not late")
}

// TestStoredPayloadsByKey: the stored bodies of the keys the ledger holds,
// and nothing for one it does not.
func TestStoredPayloadsByKey(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	in := claimOf("evt_stored", "invoice.paid")
	_, err := h.Claimer.Claim(context.Background(), in)
	require.NoError(t, err)
	got, err := h.Claimer.StoredPayloads(context.Background(), []ledger.EventKey{
		{Namespace: "stripe", EventID: "evt_stored"}, {Namespace: "stripe", EventID: "evt_absent"}, {Namespace: "other", EventID: "evt_stored"},
	})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, string(in.Payload), string(got[ledger.EventKey{Namespace: "stripe", EventID: "evt_stored"}]))
}
