package ledger

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestAbsorbReadsOnlyItsIndex: under the apply's plan settings, the absorb
// statement reaches the jobs it may absorb through river_job_absorbable,
// which holds no other job, so a backlog of other jobs ahead of them costs
// it nothing.
func TestAbsorbReadsOnlyItsIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	_, err := db.SQL.ExecContext(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state)
		SELECT jsonb_build_object('namespace', 'stripe', 'event_id', 'evt_' || g), 'apply_event', 5, 'default', 'available'
		FROM generate_series(1, 500) g`)
	require.NoError(t, err)
	tx, err := db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // read only
	_, err = tx.ExecContext(ctx, applyPlanSQL)
	require.NoError(t, err)
	plan := dbtest.Strings(t, tx, `EXPLAIN `+absorbSQL, "default", int64(0), maxAbsorbedJobs, absorbEvents)
	require.Contains(t, strings.Join(plan, "\n"), "Index Scan using river_job_absorbable on river_job", strings.Join(plan, "\n"))
}
