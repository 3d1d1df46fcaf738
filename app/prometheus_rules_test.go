package app_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestPrometheusRules: deploy/prometheus/alerts.yml passes promtool check
// rules and its unit tests (promtool test rules); each of its at least
// six alerts has a severity, a runbook section in docs/operating.md and
// a unit test. Without promtool (Debian's prometheus package ships it)
// the promtool half is skipped, saying so, and the rest still runs.
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	tests, err := os.ReadFile("../deploy/prometheus/alerts_test.yml")
	require.NoError(t, err)
	runbooks, err := os.ReadFile("../docs/operating.md")
	require.NoError(t, err)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			anchor := "runbook-" + strings.ToLower(r.Alert)
			require.True(t, strings.HasSuffix(r.Annotations["runbook_url"], "docs/operating.md#"+anchor), r.Alert)
			require.Contains(t, string(runbooks), "\n### Runbook: "+r.Alert+"\n", "docs/operating.md has the runbook of %s", r.Alert)
			require.Contains(t, string(tests), "alertname: "+r.Alert+"\n", "alerts_test.yml tests %s", r.Alert)
		}
	}
	require.GreaterOrEqual(t, len(alerts), 6)

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool check rules and test rules need promtool: apt-get install -y prometheus")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../deploy/prometheus"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		require.Contains(t, string(out), "SUCCESS")
	}
}
