package app_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestPrunedDeliveriesStayDuplicates: a captured GitHub delivery (GitHub
// signs no timestamp), a Shopify delivery and a Stripe event, delivered,
// settled, aged past RETENTION and pruned with the command, are each a
// duplicate when delivered again, and so is the GitHub body under a new
// delivery id; the ledger keeps no row and no payload of them.
func TestPrunedDeliveriesStayDuplicates(t *testing.T) {
	env := map[string]string{
		"GITHUB_WEBHOOK_SECRET":  providerSecrets["github"],
		"SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
	}
	s := start(t, env)
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	product, err := os.ReadFile("../testdata/providers/shopify/products.update.shopify-dev-example.json")
	require.NoError(t, err)
	github := func(id string) http.Header {
		return http.Header{"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)},
			"X-Github-Delivery": {id}, "X-Github-Event": {"push"}}
	}
	shopify := http.Header{"X-Shopify-Hmac-Sha256": {provider.SignShopify(providerSecrets["shopify"], product)},
		"X-Shopify-Event-Id": {"ev-pruned"}, "X-Shopify-Topic": {"products/update"}}
	stripe := subEvent("evt_pruned", "active", time.Now().Unix())

	deliver := func(s *server, path string, body []byte, h http.Header) string {
		t.Helper()
		code, out := s.post(t, path, body, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["status"].(string)
	}
	require.Equal(t, "claimed", deliver(s, "/webhooks/github", push, github("guid-pruned")))
	require.Equal(t, "claimed", deliver(s, "/webhooks/shopify", product, shopify))
	require.Equal(t, "claimed", deliver(s, "/webhooks/stripe", stripe, signed(stripe, time.Now())))
	for _, id := range []string{"guid-pruned", "ev-pruned", "evt_pruned"} {
		s.waitSettled(t, id)
	}

	// The server's own prune job would take the aged rows first: only the
	// command prunes here.
	require.NoError(t, s.stop())
	_, err = s.db.SQL.Exec(`UPDATE webhook_event SET received_at = now() - interval '100 days'`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", s.db.URL)
	code, stdout, stderr := run("prune", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "deleted 3 settled event(s)")
	require.Contains(t, stdout, "kept 5 dedup key(s)", "three ids and the GitHub and Shopify body digests")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))

	s = startOn(t, s.db, env, config.RoleAll)
	require.Equal(t, "duplicate", deliver(s, "/webhooks/github", push, github("guid-pruned")))
	require.Equal(t, "duplicate", deliver(s, "/webhooks/github", push, github("guid-new")), "the captured body under a new id")
	require.Equal(t, "duplicate", deliver(s, "/webhooks/shopify", product, shopify))
	require.Equal(t, "duplicate", deliver(s, "/webhooks/stripe", stripe, signed(stripe, time.Now())))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, requestJobsSQL+` AND state <> 'completed'`))
}
