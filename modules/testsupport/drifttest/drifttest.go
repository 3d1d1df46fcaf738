// Package drifttest checks and repairs a feature module's rows against the
// provider (modules/core/drift) in the stripe namespace of a ledgertest
// harness, as hookledger drift stripe does, and gives the outcome in a
// form a test compares whole.
package drifttest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// Check checks the module's rows of the stripe namespace, the ledger's
// erased subjects included, and returns the report and its findings as
// id -> "drift: field stored -> provider, ...".
func Check(t *testing.T, h *ledgertest.Harness, m drift.Module) (*drift.Report, map[string]string) {
	t.Helper()
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, Ledger: h.DB.SQL})
	require.NoError(t, err)
	got := map[string]string{}
	for _, f := range r.Findings {
		got[f.ID] = string(f.Drift) + ": " + drift.Describe(f.Fields)
	}
	return r, got
}

// Fix claims the plan's repairs through the stripe source, waits for the
// harness's workers to apply them, and returns the outcomes as id ->
// "result event type".
func Fix(t *testing.T, h *ledgertest.Harness, plan []drift.Outcome) map[string]string {
	t.Helper()
	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), plan, drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	results := map[string]string{}
	for _, o := range out {
		results[o.ID] = string(o.Result) + " " + o.EventType
	}
	return results
}

// ObjectAt is when the provider answered for the report's finding of id.
func ObjectAt(t *testing.T, r *drift.Report, id string) time.Time {
	t.Helper()
	for _, f := range r.Findings {
		if f.ID == id {
			return f.ObjectAt
		}
	}
	t.Fatalf("no finding of %s", id)
	return time.Time{}
}

// Erase erases subject from the harness's ledger and from every module's
// rows, in every namespace, as hookledger erase --subject does.
func Erase(t *testing.T, h *ledgertest.Harness, subject string) {
	t.Helper()
	ctx := context.Background()
	_, err := h.Claimer.Erase(ctx, subject, "", false)
	require.NoError(t, err)
	_, err = h.Claimer.EraseModules(ctx, h.Registry, subject, "", false)
	require.NoError(t, err)
}
