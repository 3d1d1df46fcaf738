package provider

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestToleranceBothWaysIsWhatVerifyDoes: the field that configuration and
// its documentation read says what each provider's verification does with
// a timestamp ahead of the clock by more than the tolerance.
func TestToleranceBothWaysIsWhatVerifyDoes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, name := range Names() {
		p, _ := Lookup(name)
		if p.DefaultTolerance == 0 {
			require.False(t, p.ToleranceBothWays, "%s signs no timestamp", name)
			continue
		}
		secret, _, _ := secretsFor(p)
		body := []byte(`{"id":"evt_1","event_id":"evt_1","type":"x.created","event_type":"x.created"}`)
		h, err := p.Sign(secret, Delivery{ID: "evt_1", Type: "x.created", At: now.Add(p.DefaultTolerance + time.Second), Body: body})
		require.NoError(t, err)
		_, err = p.Verify(h, body, [][]byte{[]byte(secret)}, now, -1)
		if p.ToleranceBothWays {
			require.Equal(t, ReasonFuture, ReasonOf(err), name)
		} else {
			require.NoError(t, err, name)
		}
	}
}
