package app

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// receiptArgs is a second job kind named like the payment module's.
type receiptArgs struct{}

func (receiptArgs) Kind() string { return "payment_receipt" }

type receiptWorker struct {
	river.WorkerDefaults[receiptArgs]
}

func (receiptWorker) Work(context.Context, *river.Job[receiptArgs]) error { return nil }

// TestJobKindRegisteredTwiceFailsStartup: a worker of a job kind a module
// already registers makes New fail, in a role that works jobs and in one
// that only inserts them.
func TestJobKindRegisteredTwiceFailsStartup(t *testing.T) {
	db := dbtest.New(t)
	cfg, err := config.FromEnv(func(k string) string {
		return map[string]string{"DATABASE_URL": db.URL, "STRIPE_WEBHOOK_SECRET": "whsec_registry", "LOG_LEVEL": "warn"}[k]
	})
	require.NoError(t, err)
	twice := func(a *App) { ledger.AddWorker(a.registry, receiptWorker{}) }
	for _, role := range []config.Role{config.RoleAll, config.RoleHTTP} {
		a, err := New(context.Background(), cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), role, twice)
		require.Error(t, err, "role %s", role)
		require.Nil(t, a)
		require.Contains(t, err.Error(), `worker for kind "payment_receipt" is already registered`, "role %s", role)
	}
	a, err := New(context.Background(), cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), config.RoleAll)
	require.NoError(t, err, "the modules' own registrations are sound")
	a.Close()
}
