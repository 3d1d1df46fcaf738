package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// A table of the latest state of tickets, declared once.
type ticketKey struct {
	Namespace string `col:"namespace"`
	ID        string `col:"id_text"`
}

type ticketState struct {
	Status  string `col:"status"`
	Owner   string `col:"owner,subject"`
	Points  int64  `col:"points"`
	Version int64  `col:"version"`
	EventID string `col:"event_id"`
	// note is carried through the fold, not written.
	note string
}

type ticketEvent struct {
	Created int64  `field:"created,required"`
	ID      string `field:"data.object.id,required"`
	Status  string `field:"data.object.status"`
	Owner   string `field:"data.object.owner"`
	Points  int64  `field:"data.object.points"`
}

var ticketRank = map[string]int{"open": 1, "closed": 2}

type tickets struct {
	rows  *ledger.Latest[ticketKey, ticketState]
	moved []string
}

func (m *tickets) applyTicket(_ context.Context, tx *ledger.Tx, ev *ledger.Event, e ticketEvent) error {
	m.rows.Put(tx, ticketKey{ev.Namespace, e.ID}, ticketState{e.Status, e.Owner, e.Points, e.Created, ev.EventID, "n"})
	return nil
}

func registerTickets(reg *ledger.Registry) *tickets {
	m := &tickets{}
	m.rows = ledger.NewLatest(reg, ledger.LatestOf[ticketKey, ticketState]{
		Table: "latest_ticket",
		Precedence: []ledger.Order{ledger.By("version"), ledger.ByRank("status", ticketRank), ledger.By("points"),
			ledger.By("status"), ledger.By("event_id"), ledger.By("owner")},
		Moved: func(_ context.Context, _ *ledger.Tx, moved []ledger.Entry[ticketKey, ticketState]) error {
			for _, e := range moved {
				if e.Value.note != "n" {
					return fmt.Errorf("the fold lost an untagged field of %s", e.Key.ID)
				}
				m.moved = append(m.moved, e.Key.ID+"="+e.Value.EventID)
			}
			return nil
		},
	})
	ledger.On(reg, "stripe", "ticket.*", m.applyTicket)
	return m
}

func createTickets(t *testing.T, db *dbtest.DB) {
	t.Helper()
	_, err := db.SQL.Exec(`CREATE TABLE latest_ticket (id bigserial PRIMARY KEY, namespace text NOT NULL, id_text text NOT NULL,
		status text NOT NULL, owner text NOT NULL, points bigint NOT NULL, version bigint NOT NULL, event_id text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), UNIQUE (namespace, id_text))`)
	require.NoError(t, err)
}

func ticket(id, ticketID, status, owner string, points, created int64) ledgertest.BatchEvent {
	return ledgertest.BatchEvent{ID: id, Type: "ticket.updated", Payload: fmt.Appendf(nil,
		`{"id":%q,"type":"ticket.updated","created":%d,"data":{"object":{"id":%q,"status":%q,"owner":%q,"points":%d}}}`,
		id, created, ticketID, status, owner, points)}
}

// TestLatestFoldsAndGuardsAsOne: the same events give the same row
// whether each is applied alone, in any order, or all in one apply
// batch (folded first, written once): the precedence is declared once
// and both the fold and the upsert's guard come from it.
func TestLatestFoldsAndGuardsAsOne(t *testing.T) {
	t.Parallel()
	events := []ledgertest.BatchEvent{
		ticket("evt_1", "tk_1", "open", "cus_a", 1, 100),
		ticket("evt_2", "tk_1", "closed", "cus_a", 1, 100), // same second: the further status
		ticket("evt_3", "tk_1", "open", "cus_b", 3, 100),   // ranks below closed
		ticket("evt_4", "tk_1", "open", "cus_b", 0, 90),    // older
		ticket("evt_5", "tk_2", "open", "cus_c", 2, 50),
		ticket("evt_6", "tk_2", "open", "cus_c", 5, 50), // same second and rank: more points
	}
	want := map[string]string{"tk_1": "closed/cus_a/1/100/evt_2", "tk_2": "open/cus_c/5/50/evt_6"}
	read := func(t *testing.T, h *ledgertest.Harness) map[string]string {
		got := map[string]string{}
		rows, err := h.DB.SQL.Query(`SELECT id_text, status || '/' || owner || '/' || points || '/' || version || '/' || event_id FROM latest_ticket`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id, v string
			require.NoError(t, rows.Scan(&id, &v))
			got[id] = v
		}
		return got
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("one by one, order %d", seed), func(t *testing.T) {
			t.Parallel()
			var m *tickets
			h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { m = registerTickets(h.Registry) })
			createTickets(t, h.DB)
			order := append([]ledgertest.BatchEvent(nil), events...)
			rand.New(rand.NewPCG(seed, 7)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, e := range order {
				require.NoError(t, h.Deliver(t, "stripe", e.ID, e.Type, e.Payload))
			}
			require.Equal(t, want, read(t, h))
			require.NotEmpty(t, m.moved)
		})
	}
	t.Run("one batch", func(t *testing.T) {
		t.Parallel()
		var m *tickets
		h := ledgertest.New(t, 1, func(h *ledgertest.Harness) { m = registerTickets(h.Registry) })
		createTickets(t, h.DB)
		h.InsertBatch(t, "stripe", events...)
		for _, e := range events {
			h.WaitSettled(t, "stripe", e.ID)
		}
		require.Equal(t, want, read(t, h))
		require.ElementsMatch(t, []string{"tk_1=evt_2", "tk_2=evt_6"}, m.moved, "Moved saw each key's kept state once")
	})
}

// TestLatestErasesItsSubject: Latest's own erase redacts the subject
// column, and a later event of the erased subject is written redacted.
func TestLatestErasesItsSubject(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { registerTickets(h.Registry) })
	createTickets(t, h.DB)
	e := ticket("evt_1", "tk_1", "open", "cus_a", 1, 100)
	require.NoError(t, h.Deliver(t, "stripe", e.ID, e.Type, e.Payload))
	h.Erase(t, "cus_a", "ledger_test", 1, func() int {
		return h.DB.Count(t, `SELECT count(*) FROM latest_ticket WHERE owner = 'cus_a'`)
	})
	e = ticket("evt_2", "tk_1", "closed", "cus_a", 1, 200)
	require.NoError(t, h.Deliver(t, "stripe", e.ID, e.Type, e.Payload))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM latest_ticket WHERE owner = $1 AND status = 'closed'`, ledger.Erased))
}

// TestTypedHandlerFailsForGoodNamingTheMember: an event whose payload
// lacks a required member, or has one of another JSON type, fails for
// good before the handler runs, and the failure names the member.
func TestTypedHandlerFailsForGoodNamingTheMember(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { registerTickets(h.Registry) })
	createTickets(t, h.DB)
	for id, c := range map[string]struct{ payload, want string }{
		"evt_no_id":  {`{"created": 5, "data": {"object": {"status": "open"}}}`, "stripe ticket.updated: data.object.id: required member is missing"},
		"evt_points": {`{"created": 5, "data": {"object": {"id": "tk_1", "points": "7"}}}`, "stripe ticket.updated: data.object.points: want an integer, got string"},
	} {
		err := h.Deliver(t, "stripe", id, "ticket.updated", []byte(c.payload))
		require.True(t, ledger.IsPermanent(err), "%s: %v", id, err)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "ledger_test.applyTicket", "the failure names the module's handler")
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM latest_ticket`))
}

// TestLatestRefusesWhatItCannotKeepInOrder: a declaration whose
// precedence leaves a column out, or whose key does not start with the
// namespace, stops the process from starting.
func TestLatestRefusesWhatItCannotKeepInOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	type noNamespace struct {
		ID string `col:"id_text"`
	}
	for want, register := range map[string]func(*ledger.Registry){
		`column "owner" is not in the precedence`: func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[ticketKey, ticketState]{Table: "t", Precedence: []ledger.Order{
				ledger.By("version"), ledger.By("status"), ledger.By("points"), ledger.By("event_id")}})
		},
		"the key's first column is namespace": func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[noNamespace, ticketState]{Table: "t", Precedence: []ledger.Order{
				ledger.By("version"), ledger.By("status"), ledger.By("owner"), ledger.By("points"), ledger.By("event_id")}})
		},
		`precedence column "points" is ranked but not a string`: func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[ticketKey, ticketState]{Table: "t", Precedence: []ledger.Order{
				ledger.By("version"), ledger.ByRank("points", ticketRank), ledger.By("status"), ledger.By("event_id"), ledger.By("owner")}})
		},
		// An erased subject is written redacted: deciding, it would order
		// the fold (which sees it whole) and the guard apart.
		`the subject column "owner" comes last in the precedence`: func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[ticketKey, ticketState]{Table: "t", Precedence: []ledger.Order{
				ledger.By("version"), ledger.By("status"), ledger.By("points"), ledger.By("owner"), ledger.By("event_id")}})
		},
		`column "id_text" is in the key and in the value`: func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[ticketKey, struct {
				Version int64  `col:"version"`
				ID      string `col:"id_text"`
			}]{Table: "t", Precedence: []ledger.Order{ledger.By("version"), ledger.By("id_text")}})
		},
		`column "updated_at" is the table's own`: func(r *ledger.Registry) {
			ledger.NewLatest(r, ledger.LatestOf[ticketKey, struct {
				Version int64 `col:"version"`
				Updated int64 `col:"updated_at"`
			}]{Table: "t", Precedence: []ledger.Order{ledger.By("version"), ledger.By("updated_at")}})
		},
	} {
		reg := ledger.NewRegistry()
		register(reg)
		_, err := ledger.NewRiver(db.SQL, nil, ledger.RiverOptions{
			Registry: reg, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Metrics: metrics.New(),
		})
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, "module ledger_test")
	}
}

// TestUnnestBindsByType: Unnest names each column's array type after its
// field's Go type, in field order, and binds the values in rows' order.
func TestUnnestBindsByType(t *testing.T) {
	t.Parallel()
	type status string
	type row struct {
		Namespace string `col:"namespace"`
		Status    status `col:"status"`
		Quantity  int64  `col:"quantity"`
		Skipped   string
		Live      bool `col:"live"`
	}
	from, args := ledger.Unnest([]row{{"a", "open", 1, "x", true}, {"b", "paid", 2, "y", false}}, 3)
	require.Equal(t, `unnest($3::text[], $4::text[], $5::bigint[], $6::boolean[]) AS k("namespace", "status", "quantity", "live")`, from)
	require.Equal(t, []any{[]string{"a", "b"}, []string{"open", "paid"}, []int64{1, 2}, []bool{true, false}}, args)

	db := dbtest.New(t)
	from, args = ledger.Unnest([]row{{"a", "open", 7, "", true}}, 1)
	var got string
	require.NoError(t, db.SQL.QueryRow(`SELECT k.namespace || k.status || k.quantity || k.live FROM `+from, args...).Scan(&got))
	require.Equal(t, "aopen7true", got)
	require.Panics(t, func() {
		ledger.Unnest([]struct {
			Price float64 `col:"price"`
		}{{1}}, 1)
	})
	require.Panics(t, func() {
		ledger.Unnest([]struct {
			A string `col:"a"`
			B string `col:"a"`
		}{{"x", "y"}}, 1)
	})
}

// TestLatestMovedSeesWhatWasWritten: Moved is handed an erased subject as
// the row holds it, redacted, never the subject itself; and a column may
// be a reserved word.
func TestLatestMovedSeesWhatWasWritten(t *testing.T) {
	t.Parallel()
	type state struct {
		Version int64  `col:"version"`
		EventID string `col:"event_id"`
		User    string `col:"user,subject"`
	}
	type event struct {
		Created int64  `field:"created,required"`
		ID      string `field:"id,required"`
		User    string `field:"user"`
	}
	var moved []string
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		rows := ledger.NewLatest(h.Registry, ledger.LatestOf[ticketKey, state]{
			Table:      "latest_user",
			Precedence: []ledger.Order{ledger.By("version"), ledger.By("event_id"), ledger.By("user")},
			Moved: func(_ context.Context, _ *ledger.Tx, m []ledger.Entry[ticketKey, state]) error {
				for _, e := range m {
					moved = append(moved, e.Key.ID+"="+e.Value.User)
				}
				return nil
			},
		})
		ledger.On(h.Registry, "stripe", "user.*", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event, e event) error {
			rows.Put(tx, ticketKey{ev.Namespace, e.ID}, state{e.Created, ev.EventID, e.User})
			return nil
		})
	})
	_, err := h.DB.SQL.Exec(`CREATE TABLE latest_user (id bigserial PRIMARY KEY, namespace text NOT NULL, id_text text NOT NULL,
		"user" text NOT NULL, version bigint NOT NULL, event_id text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), UNIQUE (namespace, id_text))`)
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "stripe", "evt_1", "user.updated", []byte(`{"created":1,"id":"u_1","user":"cus_a"}`)))
	h.Erase(t, "cus_a", "ledger_test", 1, func() int {
		return h.DB.Count(t, `SELECT count(*) FROM latest_user WHERE "user" = 'cus_a'`)
	})
	require.NoError(t, h.Deliver(t, "stripe", "evt_2", "user.updated", []byte(`{"created":2,"id":"u_1","user":"cus_a"}`)))
	require.Equal(t, []string{"u_1=cus_a", "u_1=" + ledger.Erased}, moved)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM latest_user WHERE "user" = $1 AND version = 2`, ledger.Erased))
}
