package app_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/simulate"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestTriggerEveryType sends each listed type to a receiver with every
// source enabled: each is claimed and applied by its module.
func TestTriggerEveryType(t *testing.T) {
	// Serial: the trigger command reads the secrets from the environment.
	s := allProviders(t)
	for name, env := range map[string]string{
		"stripe": "STRIPE_WEBHOOK_SECRET", "github": "GITHUB_WEBHOOK_SECRET",
		"paddle": "PADDLE_WEBHOOK_SECRET", "standard": "STANDARD_WEBHOOK_SECRET",
	} {
		t.Setenv(env, providerSecrets[name])
	}
	code, list, _ := run("trigger", "--list")
	require.Equal(t, 0, code)
	templates := simulate.Templates()
	for _, typ := range []string{
		"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
		"payment_intent.succeeded", "charge.refunded", "invoice.paid", "invoice.payment_failed",
		"subscription.created", "subscription.updated", "transaction.completed", "push", "usage.recorded",
	} {
		require.Contains(t, list, typ+" ")
	}

	for _, tpl := range templates {
		code, stdout, stderr := run("trigger", tpl.Type, "--url", s.base+"/webhooks/"+tpl.Provider)
		require.Equal(t, 0, code, "%s: %s", tpl.Type, stderr)
		require.Contains(t, stdout, `"status":"claimed"`, tpl.Type)
		require.True(t, strings.HasPrefix(stdout, tpl.Type+" "), stdout)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == len(templates)
	}, "every triggered event settles")
	var types []string
	rows, err := s.db.SQL.Query(`SELECT event_type FROM webhook_event ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Close())
	want := make([]string, len(templates))
	for i, tpl := range templates {
		want[i] = tpl.Type
	}
	require.Equal(t, want, types, "each body carries the type it was sent as")

	require.Equal(t, 6, s.db.Count(t, `SELECT count(*) FROM subscription`), "three Stripe and three Paddle subscriptions, fresh ids")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM subscription WHERE status = 'canceled'`), "the deleted Stripe one and the canceled Paddle one")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM payment WHERE external_id LIKE 'pi_%' AND status = 'succeeded'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM payment WHERE status = 'refunded'`), "the refund's charge")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM payment WHERE external_id LIKE 'txn_%'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT COALESCE(sum(quantity), 0) FROM usage_total WHERE customer_id = 'cus_trigger'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM github_branch`))

	// One object across events: created, then deleted.
	for _, typ := range []string{"customer.subscription.created", "customer.subscription.deleted"} {
		code, _, stderr := run("trigger", typ, "--object", "sub_trigger_demo", "--url", s.base+"/webhooks/stripe")
		require.Equal(t, 0, code, stderr)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_trigger_demo' AND status = 'canceled'`) == 1
	})

	// send stays as an alias, --type as its old flag.
	code, stdout, stderr := run("send", "--type", "invoice.paid", "--url", s.base+"/webhooks/stripe")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "invoice.paid evt_")
}

// TestSimulateEveryProvider plays each provider against a receiver: every
// event is acknowledged, and those of the shipped modules' types settle.
func TestSimulateEveryProvider(t *testing.T) {
	t.Parallel()
	s := allProviders(t)
	for name := range providerSecrets {
		code, stdout, stderr := run("simulate", "--provider", name, "--events", "8", "--duplicates", "0.5",
			"--url", s.base+"/webhooks/"+name, "--secret", providerSecrets[name], "--prefix", "sim_"+name+"_")
		require.Equal(t, 0, code, "%s: %s\n%s", name, stdout, stderr)
		require.Contains(t, stdout, `"acked":8`, name)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status <> 'settled'`) == 0
	})
	require.Equal(t, 8*len(providerSecrets), s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	for _, typ := range simulate.TypesOf("stripe") {
		require.Positive(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_type = $1`, typ), typ)
	}
}
