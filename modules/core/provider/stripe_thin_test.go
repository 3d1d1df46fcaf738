package provider

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStripeThinEventParses reads a thin event's id, type and RFC 3339
// created at full precision, and still reads a snapshot event's seconds.
func TestStripeThinEventParses(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../../../testdata/providers/stripe/thin/v1.billing.meter.error_report_triggered.json")
	require.NoError(t, err)
	ev, err := Stripe.Parse(nil, body, nil)
	require.NoError(t, err)
	require.Equal(t, "evt_234", ev.ID)
	require.Equal(t, "v1.billing.meter.error_report_triggered", ev.Type)
	require.Equal(t, time.Date(2022, 2, 15, 0, 27, 45, 330e6, time.UTC), ev.OccurredAt.UTC())

	ev, err = Stripe.Parse(nil, []byte(`{"id":"evt_1","object":"event","type":"x.y","created":1700000000}`), nil)
	require.NoError(t, err)
	require.Equal(t, time.Unix(1700000000, 0), ev.OccurredAt)

	for _, bad := range []string{`"yesterday"`, `1.5`, `{}`} {
		_, err = Stripe.Parse(nil, []byte(`{"id":"evt_1","type":"x.y","created":`+bad+`}`), nil)
		require.ErrorIs(t, err, ErrPayload, bad)
	}
}
