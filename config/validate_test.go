package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBodyLimitsValidated(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"MAX_BODY_BYTES": "1099511627776"}))
	require.ErrorContains(t, err, "MAX_BODY_BYTES=1099511627776 is over")
	_, err = FromEnv(env(map[string]string{"MAX_BODY_BYTES": "1048576", "MAX_INFLIGHT_BODY_BYTES": "1024"}))
	require.ErrorContains(t, err, "MAX_INFLIGHT_BODY_BYTES=1024 is below MAX_BODY_BYTES")
	c, err := FromEnv(env(map[string]string{"MAX_BODY_BYTES": "16777216"}))
	require.NoError(t, err)
	require.Equal(t, int64(8*16777216), c.InflightBodyBytes, "the budget holds at least eight bodies of the limit")
}
