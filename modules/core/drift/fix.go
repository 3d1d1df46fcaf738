package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Result is what became of one finding's repair.
type Result string

// The results of a repair.
const (
	// WouldRepair: a dry run's repair, not claimed.
	WouldRepair Result = "would_repair"
	// CannotRepair: no event of the module repairs it (Reason says why).
	CannotRepair Result = "cannot_repair"
	// Repaired: applied, and the row now agrees with the provider.
	Repaired Result = "repaired"
	// Superseded: applied, but an event newer than the provider's answer
	// had moved the row meanwhile; the version guard kept the newer row.
	Superseded Result = "superseded"
	// Unchanged: applied, and the row still differs: the module's writes
	// cannot take it there (Reason says what differs).
	Unchanged Result = "unchanged"
	// Pending: claimed, not applied within the wait; the workers will.
	Pending Result = "pending"
	// Failed: the apply failed (Reason is its error); River retries it.
	Failed Result = "failed"
	// Duplicate: the repair's event id was claimed before (an earlier
	// repair of the same answer, or another claim of that id): the ledger
	// kept that event, and this repair was not applied.
	Duplicate Result = "duplicate"
	// ErasedSubject: the repair holds a subject erased since the check;
	// it is not claimed, since it would write the subject back.
	ErasedSubject Result = "erased"
)

// Outcome is one finding's repair.
type Outcome struct {
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	EventID   string `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Result    Result `json:"result"`
	Reason    string `json:"reason,omitempty"`

	finding *Finding
	body    []byte
}

// Remains reports whether the drift is still there after the outcome. An
// object of an erased subject is not drift.
func (o Outcome) Remains() bool {
	return o.Result != Repaired && o.Result != Superseded && o.Result != ErasedSubject
}

// EnvelopeFunc wraps a repair's object in a provider event: its id, type
// and created.
type EnvelopeFunc func(id, typ string, created time.Time, obj json.RawMessage) ([]byte, error)

// EventID is the id of the synthetic event that repairs object id with the
// provider's answer of at: drift_<object id>_<unix seconds>.
func EventID(objectID string, at time.Time) string {
	return "drift_" + objectID + "_" + strconv.FormatInt(at.Unix(), 10)
}

// Plan works out every finding's repair, changing nothing: WouldRepair
// with the event that repairs it, or CannotRepair with the reason.
//
// A row the provider does not have is repaired only when the provider has
// some of the kind's rows: when it has none of several, the API key is
// more likely another account's (or the other mode's) than every row
// wrong.
func (r *Report) Plan(envelope EnvelopeFunc) []Outcome {
	out := make([]Outcome, len(r.Findings))
	for i := range r.Findings {
		f := &r.Findings[i]
		o := Outcome{Kind: f.Kind, ID: f.ID, finding: f}
		c := r.Checked[f.Kind]
		rep, err := f.module.Repair(f.row, f.obj)
		switch {
		case f.Drift == Ahead:
			o.Result = CannotRepair
			o.Reason = fmt.Sprintf("the row is dated %s, ahead of the provider's answer of %s: its events until then are refused as stale, and no event moves it back",
				f.RowAt.Format(time.RFC3339), f.ObjectAt.Format(time.RFC3339))
			if f.Replayed {
				o.Reason += fmt.Sprintf(" (replayed event %s wrote it)", f.RowEventID)
			}
		case f.Drift == MissingAtProvider && c.Matched == 0 && c.Gone > 1:
			o.Result = CannotRepair
			o.Reason = fmt.Sprintf("the provider has none of the %d stored %s rows checked: is the API key this namespace's account's (live or test)?", c.Gone, f.Kind)
		case err != nil:
			o.Result, o.Reason = CannotRepair, err.Error()
		default:
			o.EventID, o.EventType = EventID(f.ID, f.ObjectAt), rep.Type
			if o.body, err = envelope(o.EventID, rep.Type, f.ObjectAt, rep.Object); err != nil {
				o.Result, o.Reason = CannotRepair, err.Error()
				break
			}
			o.Result = WouldRepair
		}
		out[i] = o
	}
	return out
}

// Ledger is the part of the ledger Fix uses: *ledger.Store.
type Ledger interface {
	Claim(ctx context.Context, in ledger.Claim) (ledger.ClaimResult, error)
	Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error)
	ErasedIn(ctx context.Context, namespace string, payload []byte) ([]string, error)
}

// FixOptions says where repairs are claimed.
type FixOptions struct {
	// Source is the source the repairs are claimed through: its namespace
	// is the checked one.
	Source *intake.Source
	Ledger Ledger
	// Wait bounds how long Fix waits for the workers to apply the
	// repairs; what is not applied by then is Pending.
	Wait time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
}

// Fix claims the planned repairs, each as a replayed event of the source,
// and waits for the workers to apply them; then it reads each repaired row
// again and says whether it agrees with the provider now. A repair that
// holds a subject erased since the check is not claimed (ErasedSubject);
// one whose event id was claimed before is a Duplicate, and its row is
// not read as if it had been applied. It returns the outcomes of every
// planned repair, and an error only when the ledger or the database
// failed.
func Fix(ctx context.Context, plan []Outcome, o FixOptions) ([]Outcome, error) {
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	out := append([]Outcome(nil), plan...)
	var claimed []int
	for i := range out {
		if out[i].Result != WouldRepair {
			continue
		}
		claim, _, err := o.Source.Prepare(http.Header{}, out[i].body, nil, o.NowFunc())
		if err != nil {
			out[i].Result, out[i].Reason = CannotRepair, err.Error()
			continue
		}
		erased, err := o.Ledger.ErasedIn(ctx, o.Source.Namespace, out[i].body)
		if err != nil {
			return out, fmt.Errorf("claim %s: %w", out[i].EventID, err)
		}
		if len(erased) > 0 {
			out[i].Result, out[i].Reason = ErasedSubject, "the provider's object holds an erased subject; it is not written back"
			continue
		}
		res, err := o.Ledger.Claim(ctx, claim)
		if err != nil {
			return out, fmt.Errorf("claim %s: %w", out[i].EventID, err)
		}
		if res != ledger.Claimed {
			out[i].Result = Duplicate
			out[i].Reason = fmt.Sprintf("%s was claimed before (an earlier repair of the same answer, or another claim of that id); this repair was not applied: check again", out[i].EventID)
			continue
		}
		out[i].Result = Pending
		claimed = append(claimed, i)
	}
	if err := wait(ctx, out, claimed, o); err != nil {
		return out, err
	}
	for _, i := range claimed {
		switch out[i].Result {
		case Repaired:
			if err := recheck(ctx, o.Source.Namespace, &out[i]); err != nil {
				return out, err
			}
		case Pending:
			out[i].Reason = "claimed; no worker had applied it when the wait ended (is hookledger serve running?)"
		}
	}
	return out, nil
}

// wait polls the claimed repairs' ledger rows until each is settled or
// failed, or o.Wait has passed: settled ones become Repaired (recheck
// decides), failed ones Failed.
func wait(ctx context.Context, out []Outcome, claimed []int, o FixOptions) error {
	if len(claimed) == 0 || o.Wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		pending := 0
		for _, i := range claimed {
			if out[i].Result != Pending {
				continue
			}
			row, err := o.Ledger.Find(ctx, o.Source.Namespace, out[i].EventID)
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read repair %s: %w", out[i].EventID, err)
			}
			switch row.Status {
			case webhookevent.StatusSettled:
				out[i].Result = Repaired
			case webhookevent.StatusFailed, webhookevent.StatusDiscarded:
				out[i].Result = Failed
				if row.LastError != nil {
					out[i].Reason = *row.LastError
				}
			default:
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
			pause = min(2*pause, time.Second)
		}
	}
}

// recheck reads an applied repair's row again and compares it with the
// provider's answer the repair carried.
func recheck(ctx context.Context, namespace string, o *Outcome) error {
	f := o.finding
	rows, err := f.module.Rows(ctx, Selection{Namespace: namespace, IDs: []string{f.ID}})
	if err != nil {
		return fmt.Errorf("read %s %s again: %w", f.Kind, f.ID, err)
	}
	var row *Row
	if len(rows) > 0 {
		row = &rows[0]
	}
	if row != nil && row.At.After(f.ObjectAt) {
		o.Result = Superseded
		return nil
	}
	if diffs, drifted := f.module.Compare(row, f.obj); drifted {
		o.Result = Unchanged
		o.Reason = Describe(diffs)
	}
	return nil
}

// Describe is diffs as one line: "status active -> canceled, plan a -> b".
func Describe(diffs []Diff) string {
	s := ""
	for i, d := range diffs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s -> %s", d.Field, orDash(d.Stored), orDash(d.Provider))
	}
	if s == "" {
		return "still differs"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
