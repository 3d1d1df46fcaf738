package app_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// listedSamples runs trigger --list the way a user does and returns, by
// type, its provider and the modules the list names.
func listedSamples(t *testing.T) (providerOf, moduleOf map[string]string) {
	t.Helper()
	code, list, stderr := run("trigger", "--list")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(list), "\n")
	require.Equal(t, []string{"TYPE", "PROVIDER", "MODULE", "SAMPLE"}, strings.Fields(lines[0]))
	providerOf, moduleOf = map[string]string{}, map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		require.Len(t, f, 4, line)
		providerOf[f[0]], moduleOf[f[0]] = f[1], f[2]
		require.FileExists(t, "../"+f[3], line)
	}
	return providerOf, moduleOf
}

// TestTriggerEveryType sends each listed type to a receiver with every
// source enabled: each is claimed and applied by the modules the list
// names, as the row's handlers record.
func TestTriggerEveryType(t *testing.T) {
	// Serial: the trigger command reads the secrets from the environment.
	s := allProviders(t)
	for name, env := range map[string]string{
		"stripe": "STRIPE_WEBHOOK_SECRET", "github": "GITHUB_WEBHOOK_SECRET",
		"paddle": "PADDLE_WEBHOOK_SECRET", "standard": "STANDARD_WEBHOOK_SECRET",
	} {
		t.Setenv(env, providerSecrets[name])
	}
	providerOf, moduleOf := listedSamples(t)
	for typ, want := range map[string]string{
		"customer.subscription.created": "subscription", "customer.subscription.paused": "subscription",
		"customer.subscription.pending_update_expired": "subscription", "subscription.imported": "subscription",
		"payment_intent.succeeded": "payment", "charge.refunded": "payment", "transaction.completed": "payment",
		"push": "branchhead", "usage.recorded": "usage",
	} {
		require.Equal(t, want, moduleOf[typ], "the module of %s", typ)
	}
	require.Contains(t, moduleOf["invoice.paid"], "payment")

	for typ, p := range providerOf {
		code, stdout, stderr := run("trigger", typ, "--url", s.base+"/webhooks/"+p)
		require.Equal(t, 0, code, "%s: %s", typ, stderr)
		require.Contains(t, stdout, `"status":"claimed"`, typ)
		require.True(t, strings.HasPrefix(stdout, typ+" "), stdout)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == len(providerOf)
	}, "every triggered event settles")
	rows, err := s.db.SQL.Query(`SELECT event_type, handlers FROM webhook_event`)
	require.NoError(t, err)
	applied := map[string]string{}
	for rows.Next() {
		var typ string
		var handlers []byte
		require.NoError(t, rows.Scan(&typ, &handlers))
		var mods []string
		require.NoError(t, json.Unmarshal(handlers, &mods))
		applied[typ] = strings.Join(mods, ",")
	}
	require.NoError(t, rows.Close())
	for typ, mods := range moduleOf {
		require.Equal(t, mods, applied[typ], "%s is applied by the modules the list names", typ)
	}

	require.Equal(t, 17, s.db.Count(t, `SELECT count(*) FROM subscription`), "eight Stripe and nine Paddle subscriptions, fresh ids")
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

// TestTriggerBodyFile: --body-file sends the file's bytes as they are,
// for a sampled type or any other, and the line printed names the id and
// type the receiver stored, which are the file's; a type without a sample
// and without a file is refused (exit 2).
func TestTriggerBodyFile(t *testing.T) {
	t.Parallel()
	s := allProviders(t)
	dir := t.TempDir()
	for i, c := range []struct{ arg, typ string }{
		{"customer.subscription.updated", "customer.subscription.updated"},
		{"invoice.paid", "hookledger.test.unhandled"},
		{"never.sampled", "never.sampled"},
	} {
		id := fmt.Sprintf("evt_body_file_%d", i)
		file := filepath.Join(dir, id+".json")
		body := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":"sub_body_file_%d","status":"active"}}}`,
			id, c.typ, time.Now().Unix(), i)
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
		code, stdout, stderr := run("trigger", c.arg, "--body-file", file, "--url", s.base+"/webhooks/stripe", "--secret", providerSecrets["stripe"])
		require.Equal(t, 0, code, stderr)
		require.True(t, strings.HasPrefix(stdout, c.typ+" "+id+" -> "), "prints what it sent: %s", stdout)
		require.Contains(t, stdout, `"status":"claimed"`)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND event_type = $2`, id, c.typ))
	}
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "nothing else was sent")

	code, _, stderr := run("trigger", "never.sampled", "--url", s.base+"/webhooks/stripe", "--secret", providerSecrets["stripe"])
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--body-file")
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
	providerOf, _ := listedSamples(t)
	var stripe []string
	for typ, p := range providerOf {
		if p == "stripe" {
			stripe = append(stripe, typ)
		}
	}
	require.Equal(t, min(8, len(stripe)), s.db.Count(t, `SELECT count(DISTINCT event_type) FROM webhook_event WHERE event_type = ANY($1)`, stripe),
		"the Stripe events are the samples' types, in turn")
}
