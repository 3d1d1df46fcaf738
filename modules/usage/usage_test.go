package usage_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/ledgertest"
	"github.com/hookledger/hookledger/modules/usage"
)

func setup(t *testing.T, workers int) *ledgertest.Harness {
	t.Helper()
	return ledgertest.New(t, workers, func(h *ledgertest.Harness) { usage.Register(h.Registry) })
}

func recorded(customer, metric string, qty int) []byte {
	return []byte(fmt.Sprintf(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":%q,"metric":%q,"quantity":%d}}`, customer, metric, qty))
}

func total(t *testing.T, h *ledgertest.Harness, customer, metric string) int {
	t.Helper()
	return h.DB.Count(t, `SELECT COALESCE(sum(quantity), 0) FROM usage_total WHERE customer_id = $1 AND metric = $2`, customer, metric)
}

// TestLedgerStopsDoubleCounting: a delta has no version, so only the ledger
// stands between a retried delivery and a doubled count.
func TestLedgerStopsDoubleCounting(t *testing.T) {
	h := setup(t, 0)
	body := recorded("cus_1", "api_calls", 5)
	require.True(t, h.Claim(t, "standard", "msg_1", "usage.recorded", body))
	require.NoError(t, h.Apply(t, "standard", "msg_1", false))
	require.Equal(t, 5, total(t, h, "cus_1", "api_calls"))

	require.False(t, h.Claim(t, "standard", "msg_1", "usage.recorded", body), "the retry is a duplicate")
	require.NoError(t, h.Apply(t, "standard", "msg_1", false), "a second job for it changes nothing")
	require.Equal(t, 5, total(t, h, "cus_1", "api_calls"))

	// What a receiver without a ledger does with the retry:
	require.NoError(t, h.Apply(t, "standard", "msg_1", true))
	require.Equal(t, 10, total(t, h, "cus_1", "api_calls"), "without the ledger the count doubles")
}

func TestDuplicateStormWithWorkers(t *testing.T) {
	h := setup(t, 4)
	var wg sync.WaitGroup
	for i := range 5 {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.Claim(t, "standard", fmt.Sprintf("msg_%d", i), "usage.recorded", recorded("cus_2", "seats", i+1))
			}()
		}
	}
	wg.Wait()
	for i := range 5 {
		h.WaitSettled(t, "standard", fmt.Sprintf("msg_%d", i))
	}
	require.Equal(t, 1+2+3+4+5, total(t, h, "cus_2", "seats"))
}

func TestPoisonUsage(t *testing.T) {
	h := setup(t, 0)
	err := h.Deliver(t, "standard", "msg_bad", "usage.recorded", []byte(`{"type":"usage.recorded","data":{"quantity":1}}`))
	require.Error(t, err)
}
