package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// TestPublishedListAgesWhileRunning: a list's staleness is measured from
// its fetched_at at each scrape, so a list fetched within the max age reads
// 0 at start-up and 1 once it is older, without a restart.
func TestPublishedListAgesWhileRunning(t *testing.T) {
	t.Parallel()
	s := metrics.New()
	fetched := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := fetched.Add(29 * 24 * time.Hour)
	s.PublishedIPs.NowFunc = func() time.Time { return now }
	s.PublishedIPs.Track("stripe", fetched, 30*24*time.Hour)

	expect := func(age time.Duration, stale int) *strings.Reader {
		return strings.NewReader(fmt.Sprintf(`
# HELP hookledger_published_ips_age_seconds Age of each published sender address list in use (stripe, github), from its fetched_at.
# TYPE hookledger_published_ips_age_seconds gauge
hookledger_published_ips_age_seconds{list="stripe"} %d
# HELP hookledger_published_ips_stale 1 while a published sender address list in use is older than PUBLISHED_IPS_MAX_AGE: run hookledger ips update.
# TYPE hookledger_published_ips_stale gauge
hookledger_published_ips_stale{list="stripe"} %d
`, int(age.Seconds()), stale))
	}
	names := []string{"hookledger_published_ips_age_seconds", "hookledger_published_ips_stale"}
	require.NoError(t, testutil.GatherAndCompare(s.Registry, expect(29*24*time.Hour, 0), names...),
		"a list fetched 29 days ago is current under a 30-day max age")

	now = fetched.Add(31 * 24 * time.Hour)
	require.NoError(t, testutil.GatherAndCompare(s.Registry, expect(31*24*time.Hour, 1), names...),
		"the same process two days on: the list is older than the max age")
}
