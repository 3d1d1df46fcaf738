package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

var ninetyDays = ledger.Retention{Rows: 90 * 24 * time.Hour, Keys: 400 * 24 * time.Hour}

// ageSettled settles every row and makes it look received age ago.
func ageSettled(t *testing.T, h *ledgertest.Harness, age string) {
	t.Helper()
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled', received_at = now() - $1::interval`, age)
	require.NoError(t, err)
}

// digestClaim is a delivery of a source that signs only the body, as
// GitHub's: its digest is a second key.
func digestClaim(id, digest string) ledger.Claim {
	c := claimOf(id, "push")
	c.Namespace, c.Provider, c.Source, c.BodyDigest = "github", "github", "github", digest
	return c
}

// TestPrunedEventsStayDuplicates: prune removes the rows and keeps their
// keys, with no payload; a redelivery of a pruned event, by its id or (for
// a source that signs only the body) by its body under another id, is a
// duplicate, batched or alone; a new event is claimed.
func TestPrunedEventsStayDuplicates(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	for _, c := range []ledger.Claim{claimOf("evt_pruned", "invoice.paid"), digestClaim("guid-1", "digest-1")} {
		res, err := h.Claimer.Claim(ctx, c)
		require.NoError(t, err)
		require.Equal(t, ledger.Claimed, res)
	}
	ageSettled(t, h, "100 days")

	r, err := h.Claimer.Prune(ctx, ninetyDays, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Rows)
	require.Equal(t, int64(3), r.KeptKeys, "two event ids and one body digest")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM webhook_key WHERE octet_length(key_hash) = 16 AND received_on < current_date - 99`))

	for _, c := range []ledger.Claim{
		claimOf("evt_pruned", "invoice.paid"),
		digestClaim("guid-1", "digest-1"),
		digestClaim("guid-2", "digest-1"), // the same body under a new delivery id
	} {
		res, err := h.Claimer.Claim(ctx, c)
		require.NoError(t, err)
		require.Equal(t, ledger.Duplicate, res, c.EventID)
	}
	// In one statement with a new event, as group commit claims them.
	q, args := ledger.ClaimStatement([]ledger.Claim{claimOf("evt_new", "invoice.paid"), claimOf("evt_pruned", "invoice.paid")})
	require.Equal(t, []string{"evt_new"}, dbtest.Strings(t, h.DB.SQL, `WITH c AS (`+q+`) SELECT event_id FROM c`, args...))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	// Another namespace's event of the same id is its own.
	other := claimOf("evt_pruned", "invoice.paid")
	other.Namespace = "stripe-eu"
	res1, err := h.Claimer.Claim(ctx, other)
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res1)

	// A second prune keeps each key once.
	ageSettled(t, h, "100 days")
	r, err = h.Claimer.Prune(ctx, ninetyDays, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Rows)
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM webhook_key`))
}

// TestKeyRetentionExpiresKeptKeys: keys of events received before
// KEY_RETENTION go; zero keeps them for ever.
func TestKeyRetentionExpiresKeptKeys(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	for _, id := range []string{"evt_old", "evt_older"} {
		_, err := h.Claimer.Claim(ctx, claimOf(id, "invoice.paid"))
		require.NoError(t, err)
	}
	ageSettled(t, h, "100 days")
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET received_at = now() - interval '500 days' WHERE event_id = 'evt_older'`)
	require.NoError(t, err)

	r, err := h.Claimer.Prune(ctx, ledger.Retention{Rows: ninetyDays.Rows}, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.KeptKeys)
	require.Zero(t, r.ExpiredKeys, "zero keeps them for ever")

	r, err = h.Claimer.Prune(ctx, ninetyDays, false)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.ExpiredKeys)
	res, err := h.Claimer.Claim(ctx, claimOf("evt_old", "invoice.paid"))
	require.NoError(t, err)
	require.Equal(t, ledger.Duplicate, res)
	res, err = h.Claimer.Claim(ctx, claimOf("evt_older", "invoice.paid"))
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res, "its key expired")
}

// TestPruneWaitsForClaimsThatBeganBefore: prune deletes no row while a
// transaction that began before it kept the keys still runs (a claim with
// that snapshot could miss the keys, and then the row), and deletes them
// once it ends.
func TestPruneWaitsForClaimsThatBeganBefore(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*dbtest.Patience)
	defer cancel()
	_, err := h.Claimer.Claim(ctx, claimOf("evt_waited", "invoice.paid"))
	require.NoError(t, err)
	ageSettled(t, h, "100 days")

	old, err := h.DB.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer old.Rollback() //nolint:errcheck
	_, err = old.Exec(`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	var n int
	require.NoError(t, old.QueryRow(`SELECT count(*) FROM webhook_key`).Scan(&n), "the snapshot is taken")

	done := make(chan error, 1)
	go func() {
		_, err := h.Claimer.Prune(ctx, ninetyDays, false)
		done <- err
	}()
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%age(backend_xmin)%' AND pid <> pg_backend_pid()`) > 0
	}, "prune never waited")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_key`), "the keys are kept first")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event`), "no row goes while the older transaction runs")

	require.NoError(t, old.Rollback())
	require.NoError(t, <-done)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
}
