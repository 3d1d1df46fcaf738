package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMetricLabelsAreBounded: event types come from senders, so a type no
// handler matches is counted as "other", never as a label of its own:
// /metrics does not grow with the types a sender invents.
func TestMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	before := len(s.metrics(t))
	invented := strings.Repeat("x", 200)
	for i := range 40 {
		id := fmt.Sprintf("evt_label_%d", i)
		body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"%s.%d","created":%d,"data":{"object":{"id":"obj_1"}}}`, id, invented, i, time.Now().Unix()))
		code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
	}
	for i := range 40 {
		s.waitSettled(t, fmt.Sprintf("evt_label_%d", i))
	}
	body := subEvent("evt_label_sub", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_label_sub")

	m := s.metrics(t)
	require.NotContains(t, m, invented, "an invented type is never a label")
	require.Contains(t, m, `hookledger_applies_total{event_type="other",outcome="unhandled",provider="stripe"} 40`)
	require.Contains(t, m, `hookledger_applies_total{event_type="customer.subscription.updated",outcome="settled",provider="stripe"} 1`)
	require.Less(t, len(m)-before, 8<<10, "40 invented types add a few series, not 40")
}
