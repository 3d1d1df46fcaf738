package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetentionFloorSaysWhatIsLost: a RETENTION under Stripe's replay
// window is refused for what pruning takes now. A pruned event's keys are
// kept, so its redelivery is still a duplicate; what goes is its stored
// body, which a redelivery or replay in that window is compared with and
// an operator shows or requeues it from.
func TestRetentionFloorSaysWhatIsLost(t *testing.T) {
	t.Parallel()
	_, err := FromEnv(env(map[string]string{"RETENTION": "240h"}))
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "RETENTION=240h0m0s is below 720h0m0s, Stripe's replay window")
	require.Contains(t, msg, "KEY_RETENTION", "the kept keys are named")
	require.Contains(t, msg, "still a duplicate")
	require.NotContains(t, msg, "applied twice", "kept keys stop a pruned event being applied again")
}
