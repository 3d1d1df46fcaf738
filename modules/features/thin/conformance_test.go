package thin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/thin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// snapshotSub is what the suite's subscription module reads of a snapshot
// event.
type snapshotSub struct {
	Created int64  `field:"created"`
	ID      string `field:"data.object.id"`
	Status  string `field:"data.object.status"`
}

var snapshotFields = provider.FieldsOf[snapshotSub]()

// subscriptions is a subscription module for the suite (a feature's tests
// do not import another feature): it keeps each subscription's newest
// state, written through a ledger.Write.
func subscriptions(h *ledgertest.Harness) {
	if _, err := h.DB.SQL.Exec(`CREATE TABLE thin_subscription (id text PRIMARY KEY, status text NOT NULL, version bigint NOT NULL)`); err != nil {
		panic(err)
	}
	type state struct {
		status  string
		version int64
	}
	states := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, state]{
		Merge: func(older, newer state) state {
			if newer.version > older.version {
				return newer
			}
			return older
		},
		Flush: func(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[string, state]) error {
			ids, statuses, versions := make([]string, len(entries)), make([]string, len(entries)), make([]int64, len(entries))
			for i, e := range entries {
				ids[i], statuses[i], versions[i] = e.Key, e.Value.status, e.Value.version
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO thin_subscription AS s (id, status, version)
				SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
				ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = EXCLUDED.version WHERE s.version < EXCLUDED.version`,
				ids, statuses, versions)
			return err
		},
	})
	h.Registry.Handle("stripe", "customer.subscription.updated", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
		s, err := snapshotFields.Read(ev.Payload)
		if err != nil {
			return ledger.Permanent(err)
		}
		states.Put(tx, s.ID, state{status: s.Status, version: s.Created})
		return nil
	})
}

// TestConformance runs the ledger's suite on thin events of two
// subscriptions, which the module applies as the snapshot events that the
// objects it fetches make: each subscription ends at the state Stripe
// serves, at the version of its newest thin event.
func TestConformance(t *testing.T) {
	t.Parallel()
	api := newFakeStripe(t, map[string]string{
		"/v1/subscriptions/sub_1": subscriptionJSON,
		"/v1/subscriptions/sub_2": `{"id":"sub_2","object":"subscription","customer":"cus_2","status":"past_due"}`,
	})
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	thinOf := func(id, sub string, created time.Time) ledgertest.Event {
		return ledgertest.Event{Provider: "stripe", ID: id, Type: "v1.customer.subscription.updated", Payload: fmt.Appendf(nil,
			`{"id":%q,"object":"v2.core.event","type":"v1.customer.subscription.updated","created":%q,`+
				`"related_object":{"id":%q,"type":"subscription","url":"/v1/subscriptions/%s"}}`, id, created.Format(time.RFC3339Nano), sub, sub)}
	}
	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) {
			subscriptions(h)
			thin.Register(h.Registry, thin.Config{API: provider.StripeAPI{Base: api.URL, Key: "sk_test_thin"}})
		},
		Events: []ledgertest.Event{
			thinOf("evt_thin_conf_1", "sub_1", at),
			thinOf("evt_thin_conf_2", "sub_2", at.Add(time.Second)),
			thinOf("evt_thin_conf_3", "sub_1", at.Add(2*time.Second)),
			thinOf("evt_thin_conf_4", "sub_2", at.Add(3*time.Second)),
		},
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, []string{"sub_1 active " + fmt.Sprint(at.Unix()+2), "sub_2 past_due " + fmt.Sprint(at.Unix()+3)},
				dbtest.Strings(t, h.DB.SQL, `SELECT id || ' ' || status || ' ' || version FROM thin_subscription ORDER BY id`))
		},
		State: `SELECT id, status, version FROM thin_subscription`,
	})
}
