package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestSplitRoles runs two receivers and two workers on one database under
// duplicate load: every event is claimed once and applied once.
func TestSplitRoles(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	runSplitRoles(t, db, nil, nil, nil)
}

// runSplitRoles is the split-role scenario on db; the maps add to each
// process's environment: both receivers', the first worker's, the second's.
func runSplitRoles(t *testing.T, db *dbtest.DB, receiverEnv, workerEnv, otherWorkerEnv map[string]string) {
	t.Helper()
	// Four processes share the test server's connections.
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"], "DB_MAX_CONNS": "4"}
		maps.Copy(env, extra)
		return env
	}
	receivers := []*server{startOn(t, db, with(receiverEnv), config.RoleHTTP), startOn(t, db, with(receiverEnv), config.RoleHTTP)}
	startOn(t, db, with(workerEnv), config.RoleWorker)
	worker := startOn(t, db, with(otherWorkerEnv), config.RoleWorker)

	code, _ := worker.post(t, "/webhooks/standard", []byte(`{}`), nil)
	require.Equal(t, http.StatusNotFound, code, "a worker takes no webhooks")
	resp, err := http.Get(worker.base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "every role serves health")

	const events, copies = 40, 4
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[string]int{}
	)
	for i := range events {
		body := []byte(fmt.Sprintf(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":"cus_roles","metric":"calls","quantity":%d}}`, i+1))
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := receivers[(i+c)%2]
				code, out := r.post(t, "/webhooks/standard", body, standardSigned(t, fmt.Sprintf("msg_roles_%d", i), body))
				mu.Lock()
				counts[fmt.Sprintf("%d %v", code, out["status"])]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	require.Equal(t, map[string]int{"200 claimed": events, "200 duplicate": events * (copies - 1)}, counts)
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == events
	})
	require.Equal(t, events*(events+1)/2, db.Count(t, `SELECT quantity FROM usage_total WHERE customer_id = 'cus_roles'`), "each delta applied exactly once")
	require.Equal(t, events, db.Count(t, ledgertest.JobCoverageSQL), "one apply job per event")
	require.Equal(t, events, db.Count(t, `SELECT sum(attempts) FROM webhook_event`))
}
