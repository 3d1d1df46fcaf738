package app_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestEraseSubject: erase lists, then erases, every stored payload that
// holds a customer id (a failed event is discarded first); no stored
// payload or header holds it afterwards, the rows keep their ids, types
// and status, other customers' payloads are untouched, redeliveries stay
// duplicates and an erased event cannot be requeued.
func TestEraseSubject(t *testing.T) {
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	forCustomer := func(id, customer string) []byte {
		return bytes.Replace(subEvent(id, "active", time.Now().Unix()), []byte(`"cus_e2e"`), []byte(`"`+customer+`"`), 1)
	}
	bodies := map[string][]byte{}
	for _, e := range []struct{ id, customer string }{
		{"evt_erase_1", "cus_gone"}, {"evt_erase_2", "cus_gone"}, {"evt_keep", "cus_stays"},
	} {
		bodies[e.id] = bytes.Replace(forCustomer(e.id, e.customer), []byte(`"sub_e2e"`), []byte(`"sub_`+e.id+`"`), 1)
		code, _ := s.post(t, "/webhooks/stripe", bodies[e.id], signed(bodies[e.id], time.Now()))
		require.Equal(t, http.StatusOK, code)
		s.waitSettled(t, e.id)
	}
	// A failed event of the customer: it can no longer be applied.
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET status = 'failed' WHERE event_id = 'evt_erase_2'`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", s.db.URL)

	code, stdout, stderr := run("erase", "--subject", "cus_gone", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "evt_erase_1")
	require.Contains(t, stdout, "evt_erase_2")
	require.NotContains(t, stdout, "evt_keep")
	require.Contains(t, stdout, "would erase 2 event payload(s)")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE strpos(payload, 'cus_gone') > 0`), "a dry run changes nothing")

	code, _, stderr = run("erase", "--subject", "cus_gone")
	require.Equal(t, 2, code, "without a terminal it needs --yes")
	require.Contains(t, stderr, "--yes")
	code, stdout, stderr = run("erase", "--subject", "cus_gone", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "erased 2 event payload(s)")

	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE strpos(payload, 'cus_gone') > 0 OR strpos(coalesce(headers::text, ''), 'cus_gone') > 0`))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NOT NULL AND headers IS NULL
		AND event_type = 'customer.subscription.updated' AND event_id IN ('evt_erase_1', 'evt_erase_2')`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_erase_2' AND status = 'discarded'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_keep' AND strpos(payload, 'cus_stays') > 0 AND erased_at IS NULL`))

	code, page, _ := s.page(t, "/console/event?namespace=stripe&id=evt_erase_1", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `id="erased"`, "the console shows the event as erased")
	require.NotContains(t, page, "cus_gone")
	code, page, _ = s.page(t, "/console/event?namespace=stripe&id=evt_keep", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, `id="erased"`)

	for id, body := range bodies {
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "duplicate", out["status"], id)
	}
	code, _, stderr = run("events", "requeue", "--force", "evt_erase_1")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "erased")
	code, stdout, _ = run("erase", "--subject", "cus_gone", "--yes")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "erased 0 event payload(s)", "erasing again finds nothing")
}

// TestEraseModuleRows: erase also erases the subject from the modules'
// tables, one line per module with its count: afterwards no subscription,
// payment or usage row holds the customer id in any column, another
// customer's rows are untouched, a dry run prints the same counts and
// changes nothing, redeliveries of the erased events stay duplicates and
// write nothing back, and a module that fails is named and changes
// nothing.
func TestEraseModuleRows(t *testing.T) {
	s := start(t, map[string]string{"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"]})
	type delivery struct {
		path   string
		body   []byte
		header http.Header
	}
	deliveries := map[string]delivery{}
	for _, c := range []string{"cus_A", "cus_B"} {
		obj := strings.ToLower(c[len(c)-1:]) // object ids that do not spell the customer id
		sub := bytes.Replace(bytes.Replace(subEvent("evt_sub_"+obj, "active", time.Now().Unix()), []byte(`"cus_e2e"`), []byte(`"`+c+`"`), 1),
			[]byte(`"sub_e2e"`), []byte(`"sub_`+obj+`"`), 1)
		pay := []byte(fmt.Sprintf(`{"id":"evt_pay_%s","object":"event","type":"payment_intent.succeeded","created":%d,`+
			`"data":{"object":{"id":"pi_%s","object":"payment_intent","amount":1000,"amount_received":1000,"currency":"eur","customer":%q}}}`,
			obj, time.Now().Unix(), obj, c))
		use := []byte(fmt.Sprintf(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":%q,"metric":"calls","quantity":4}}`, c))
		deliveries["evt_sub_"+obj] = delivery{"/webhooks/stripe", sub, signed(sub, time.Now())}
		deliveries["evt_pay_"+obj] = delivery{"/webhooks/stripe", pay, signed(pay, time.Now())}
		deliveries["msg_use_"+obj] = delivery{"/webhooks/standard", use, standardSigned(t, "msg_use_"+obj, use)}
	}
	for id, d := range deliveries {
		code, out := s.post(t, d.path, d.body, d.header)
		require.Equal(t, http.StatusOK, code, "%s: %v", id, out)
		s.waitSettled(t, id)
	}
	// holding counts the module rows that hold customer in any column.
	holding := func(customer string) map[string]int {
		n := map[string]int{}
		for _, table := range []string{"subscription", "payment", "usage_total", "usage_delta"} {
			n[table] = s.db.Count(t, `SELECT count(*) FROM `+table+` r WHERE strpos(row_to_json(r)::text, $1) > 0`, customer)
		}
		return n
	}
	all := map[string]int{"subscription": 1, "payment": 1, "usage_total": 1, "usage_delta": 1}
	require.Equal(t, all, holding("cus_A"))
	t.Setenv("DATABASE_URL", s.db.URL)
	counts := []string{"module subscription: %s 1 row(s)", "module payment: %s 1 row(s)", "module usage: %s 2 row(s)"}

	code, stdout, stderr := run("erase", "--subject", "cus_A", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "would erase 3 event payload(s)")
	for _, c := range counts {
		require.Contains(t, stdout, fmt.Sprintf(c, "would erase"))
	}
	require.Equal(t, all, holding("cus_A"), "a dry run changes nothing")

	code, stdout, stderr = run("erase", "--subject", "cus_A", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "erased 3 event payload(s)")
	for _, c := range counts {
		require.Contains(t, stdout, fmt.Sprintf(c, "erased"))
	}
	require.Equal(t, map[string]int{"subscription": 0, "payment": 0, "usage_total": 0, "usage_delta": 0}, holding("cus_A"))
	require.Equal(t, all, holding("cus_B"), "another customer's rows stay")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM subscription WHERE status = 'active'`), "the redacted row keeps its state")

	for id, d := range deliveries {
		if !bytes.Contains(d.body, []byte("cus_A")) {
			continue
		}
		code, out := s.post(t, d.path, d.body, d.header)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "duplicate", out["status"], id)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('apply_event', 'apply_batch') AND state <> 'completed'`),
		"a duplicate is not applied")
	require.Zero(t, holding("cus_A")["subscription"]+holding("cus_A")["payment"]+holding("cus_A")["usage_total"]+holding("cus_A")["usage_delta"])

	// A module that fails is named, and no module's rows change.
	_, err := s.db.SQL.Exec(`ALTER TABLE usage_total RENAME COLUMN customer_id TO customer`)
	require.NoError(t, err)
	code, _, stderr = run("erase", "--subject", "cus_B", "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "module usage")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE customer_id = 'cus_B'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM payment WHERE customer_id = 'cus_B'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM usage_delta WHERE customer_id = 'cus_B'`))
}

// TestEraseUnderLogOnly: under CLAIM_MODE=log-only a redelivery is applied
// again; an erased event's is not (its payload is gone), and the row stays
// settled and erased.
func TestEraseUnderLogOnly(t *testing.T) {
	s := start(t, map[string]string{"CLAIM_MODE": "log-only"})
	body := subEvent("evt_erase_logonly", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_erase_logonly")
	t.Setenv("DATABASE_URL", s.db.URL)
	code, _, stderr := run("erase", "--subject", "cus_e2e", "--yes")
	require.Equal(t, 0, code, stderr)

	code, _ = s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	}, "the redelivery's apply job ends")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_erase_logonly'
		AND status = 'settled' AND erased_at IS NOT NULL AND last_error IS NULL`))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM subscription WHERE customer_id = 'cus_e2e'`))
}
