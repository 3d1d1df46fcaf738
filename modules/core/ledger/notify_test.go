package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestClaimWakesWorkersAsOftenAsTheirClient: a claim tells the workers
// that its job is waiting (River's insert notification) whenever the
// process's own River client would, at most once per FetchCooldown, not
// once per River's default of 100 ms: idle workers that miss it find the
// job only at their next poll, up to a second later.
func TestClaimWakesWorkersAsOftenAsTheirClient(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, h.DB.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `LISTEN "public.river_insert"`)
	require.NoError(t, err)
	wait := func() error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := conn.WaitForNotification(ctx)
		return err
	}

	h.Claim(t, "stripe", "evt_wake_1", "invoice.paid", []byte(`{"id":"evt_wake_1"}`))
	require.NoError(t, wait(), "the first claim notifies")
	// A gap past the cooldown (and well inside River's default): the
	// second claim must notify again. A slower machine only makes the gap
	// longer, which cannot fail this.
	time.Sleep(4 * ledger.FetchCooldown)
	h.Claim(t, "stripe", "evt_wake_2", "invoice.paid", []byte(`{"id":"evt_wake_2"}`))
	require.NoError(t, wait(), "a claim after the cooldown notifies again")
}
