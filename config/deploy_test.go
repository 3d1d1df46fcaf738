package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
)

func TestDeploySettings(t *testing.T) {
	t.Parallel()
	load := func(env map[string]string) (*config.Config, error) {
		return config.FromEnv(func(k string) string { return env[k] })
	}
	c, err := load(nil)
	require.NoError(t, err)
	require.Equal(t, config.PoolerNone, c.DatabasePooler)
	require.False(t, c.Tracing, "no OTEL_* variable: tracing off")

	c, err = load(map[string]string{"DATABASE_URL": "postgres://pooler/db", "DATABASE_POOLER": "transaction", "DATABASE_DIRECT_URL": "postgres://primary/db"})
	require.NoError(t, err)
	require.Equal(t, config.PoolerTransaction, c.DatabasePooler)
	require.Equal(t, "postgres://primary/db", c.MigrationURL(), "migrations take the direct URL")

	_, err = load(map[string]string{"DATABASE_POOLER": "statement"})
	require.ErrorContains(t, err, `DATABASE_POOLER="statement"`)

	for _, tc := range []struct {
		env map[string]string
		on  bool
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "hookledger"}, false},
	} {
		c, err := load(tc.env)
		require.NoError(t, err)
		require.Equal(t, tc.on, c.Tracing, "%v", tc.env)
	}
	c, err = load(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
	require.NoError(t, err)
	require.Equal(t, "grpc", c.TracingProtocol)
	_, err = load(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
	require.ErrorContains(t, err, "want grpc or http/protobuf")
}
