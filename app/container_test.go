package app_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestComposeFile checks compose.yaml against what the Compose
// specification and hookledger's start-up order need.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../compose.yaml")
	require.NoError(t, err)
	type service struct {
		Image       string         `yaml:"image"`
		Build       any            `yaml:"build"`
		Command     []string       `yaml:"command"`
		Environment map[string]any `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Profiles []string `yaml:"profiles"`
	}
	var doc struct {
		Services map[string]service `yaml:"services"`
		Volumes  map[string]any     `yaml:"volumes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(false)
	require.NoError(t, dec.Decode(&doc))
	require.NotEmpty(t, doc.Services, "services is the one required top-level key")
	for name, s := range doc.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has an image or a build", name)
		for dep := range s.DependsOn {
			require.Contains(t, doc.Services, dep, "service %s depends on a defined service", name)
		}
	}
	pg, migrate, serve := doc.Services["postgres"], doc.Services["migrate"], doc.Services["hookledger"]
	require.NotNil(t, pg.Healthcheck, "postgres has a health check")
	require.Equal(t, []string{"migrate", "up"}, migrate.Command)
	require.Equal(t, "service_healthy", migrate.DependsOn["postgres"].Condition)
	require.Equal(t, []string{"serve"}, serve.Command)
	require.Equal(t, "service_completed_successfully", serve.DependsOn["migrate"].Condition, "serve starts after migrate up")
	require.NotNil(t, serve.Healthcheck)
	require.Equal(t, []string{"CMD", "/hookledger", "healthcheck"}, serve.Healthcheck.Test, "no shell in the image: the binary checks itself")
	require.Contains(t, serve.Environment, "DATABASE_URL")
	require.Contains(t, doc.Services["redis"].Profiles, "redis", "Redis is optional")
}
