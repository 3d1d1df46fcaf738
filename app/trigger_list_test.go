package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/simulate"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestTriggerListNamesTheModulesThatApply: trigger --list names, for each
// type, the modules whose handlers apply it, and "none" for a type no
// handler matches; a receiver given each listed type applies it through a
// handler exactly when the list names a module.
func TestTriggerListNamesTheModulesThatApply(t *testing.T) {
	t.Parallel()
	code, list, stderr := run("trigger", "--list")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(list), "\n")
	require.Equal(t, []string{"TYPE", "PROVIDER", "MODULE", "BUILT", "FROM"}, strings.Fields(lines[0]))
	module, providerOf := map[string]string{}, map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		require.Len(t, f, 4, line)
		module[f[0]], providerOf[f[0]] = f[2], f[1]
	}
	require.Len(t, module, len(simulate.Templates()), "one line per type")
	for typ, want := range map[string]string{
		"customer.subscription.created": "subscription", "customer.subscription.deleted": "subscription",
		"payment_intent.succeeded": "payment", "charge.refunded": "payment", "invoice.paid": "payment",
		"invoice.payment_failed": "none",
		"subscription.canceled":  "subscription", "transaction.completed": "payment",
		"push": "branchhead", "usage.recorded": "usage",
	} {
		require.Equal(t, want, module[typ], "the module of %s", typ)
	}

	// Each type, sent: applied by a handler, or settled as unhandled.
	s := allProviders(t)
	for typ, p := range providerOf {
		code, stdout, stderr := run("trigger", typ, "--url", s.base+"/webhooks/"+p, "--secret", providerSecrets[p])
		require.Equal(t, 0, code, "%s: %s", typ, stderr)
		require.Contains(t, stdout, `"status":"claimed"`, typ)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == len(providerOf)
	}, "every triggered event settles")
	// The apply counts its metric once its transaction has committed: a
	// scrape may come between the two.
	var want []string
	unhandled := map[string]int{}
	for typ, mod := range module {
		p := providerOf[typ]
		if mod == "none" {
			unhandled[p]++
			continue
		}
		want = append(want, fmt.Sprintf(`hookledger_applies_total{event_type=%q,outcome="settled",provider=%q} 1`+"\n", typ, p))
	}
	var m string
	dbtest.Eventually(t, func() bool {
		m = s.metrics(t)
		for _, line := range want {
			if !strings.Contains(m, line) {
				return false
			}
		}
		return true
	}, "each type is applied by a handler, as the list says")
	for p, n := range unhandled {
		require.Contains(t, m, fmt.Sprintf(`hookledger_applies_total{event_type="other",outcome="unhandled",provider=%q} %d`+"\n", p, n),
			"the %s types listed without a module are applied by none", p)
	}
	require.Equal(t, len(unhandled), strings.Count(m, `outcome="unhandled"`), "no other type went unhandled")
}
