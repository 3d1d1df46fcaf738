package drift

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Category is how an object drifted.
type Category string

// The categories of drift.
const (
	// MissingHere: the provider has the object, hookledger has no row.
	MissingHere Category = "missing_here"
	// MissingAtProvider: hookledger has a row, the provider has no object.
	MissingAtProvider Category = "missing_at_provider"
	// Differs: both have it, and some fields differ.
	Differs Category = "differs"
	// Ahead: the row is dated after the provider's answer by more than
	// the check took: an event dated in the future (a replay, a clock)
	// wrote it, and every genuine event until that date is refused as
	// stale. No event of the module's can repair it.
	Ahead Category = "ahead"
)

// aheadSlack is how far a row may be dated after the provider's answer,
// beyond the time the check took between the answer and reading the row,
// and not be ahead: the answer's Date and an event's created are both
// whole seconds.
const aheadSlack = time.Second

// Finding is one drifted object.
type Finding struct {
	Kind   string   `json:"kind"`
	ID     string   `json:"id"`
	Drift  Category `json:"drift"`
	Fields []Diff   `json:"fields,omitempty"`
	// RowVersion and RowAt are the stored row's version, in the module's
	// unit and as a time; absent without a row.
	RowVersion int64      `json:"row_version,omitempty"`
	RowAt      *time.Time `json:"row_at,omitempty"`
	// ObjectAt is when the provider answered, by its clock.
	ObjectAt time.Time `json:"object_at"`
	// RowEventID is the ledger event that last wrote the row, when the
	// module keeps it; Replayed says that event was replayed (replay, a
	// drift repair, X-Replay-Token) rather than delivered.
	RowEventID string `json:"row_event_id,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`

	module Module
	row    *Row
	obj    *Object
}

// Counts is what a check saw of one kind.
type Counts struct {
	// Objects is the provider objects listed or fetched; Rows the stored
	// rows compared; Matched the rows whose object the provider has; Gone
	// the rows whose object it does not.
	Objects int `json:"objects"`
	Rows    int `json:"rows"`
	Matched int `json:"matched"`
	Gone    int `json:"gone"`
	Drifted int `json:"drifted"`
	// Erased is the pairs that differ because a subject was erased: the
	// row redacted, or the provider's object holding an erased subject.
	// They are not drift.
	Erased int `json:"erased"`
}

// Report is the outcome of one check of a namespace.
type Report struct {
	Namespace string             `json:"namespace"`
	Since     *time.Time         `json:"since,omitempty"`
	Checked   map[string]*Counts `json:"checked"`
	// Findings are the drifted objects, by kind and id.
	Findings []Finding `json:"drifted"`
	// Erased are the objects that differ only as an erased subject makes
	// them (their fields left out, which would show it), by kind and id.
	// They are not drift and are never repaired: a repair would write
	// the subject back.
	Erased []Finding `json:"erased"`
}

// Options says what Check compares.
type Options struct {
	Namespace string
	// Since limits the check to objects the provider created and rows
	// written at or after it; zero checks everything.
	Since   time.Time
	Modules []Module
	// Progress, when set, is told a kind's counts as they change.
	Progress func(kind string, c Counts)
	// NowFunc is the clock of a fetch whose answer carries no time of
	// the provider's; time.Now when nil.
	NowFunc func() time.Time
	// Ledger is the database that records erased subjects and holds the
	// ledger: a row or object of an erased subject is reported apart, and
	// a row a replayed event wrote is marked. Nil checks neither.
	Ledger ledger.Queryer
}

// rowPage is how many stored rows are read at a time.
const rowPage = 500

// Check compares every module's stored rows of the namespace with the
// provider's objects. It stops at the first error (the provider failing
// after its retries, the database), returning what it found so far.
func Check(ctx context.Context, o Options) (*Report, error) {
	r := &Report{Namespace: o.Namespace, Checked: map[string]*Counts{}, Findings: []Finding{}, Erased: []Finding{}}
	if !o.Since.IsZero() {
		since := o.Since
		r.Since = &since
	}
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	var err error
	for _, m := range o.Modules {
		c := &check{o: o, m: m, r: r, counts: &Counts{}, seen: map[string]bool{}}
		r.Checked[m.Kind()] = c.counts
		if err = c.run(ctx); err != nil {
			err = fmt.Errorf("check %s: %w", m.Kind(), err)
			break
		}
	}
	if err == nil {
		err = markReplayed(ctx, o, r.Findings)
	}
	byID := func(a, b Finding) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) }
	slices.SortFunc(r.Findings, byID)
	slices.SortFunc(r.Erased, byID)
	return r, err
}

// markReplayed marks the findings whose row a replayed event wrote.
func markReplayed(ctx context.Context, o Options, fs []Finding) error {
	var events []string
	for _, f := range fs {
		if f.RowEventID != "" {
			events = append(events, f.RowEventID)
		}
	}
	if o.Ledger == nil || len(events) == 0 {
		return nil
	}
	rows, err := o.Ledger.QueryContext(ctx, `SELECT event_id FROM webhook_event WHERE namespace = $1 AND event_id = ANY($2) AND replayed`, o.Namespace, events)
	if err != nil {
		return fmt.Errorf("read the rows' events: %w", err)
	}
	defer rows.Close()
	replayed := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read the rows' events: %w", err)
		}
		replayed[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the rows' events: %w", err)
	}
	for i := range fs {
		fs[i].Replayed = replayed[fs[i].RowEventID]
	}
	return nil
}

// check is one module's part of a check.
type check struct {
	o      Options
	m      Module
	r      *Report
	counts *Counts
	// seen is the ids the provider's list returned.
	seen map[string]bool
}

// run compares the listed objects with their rows, then the rows the list
// did not return with their objects fetched by id.
func (c *check) run(ctx context.Context) error {
	err := c.m.List(ctx, c.o.Since, func(objs []Object) error {
		answered := time.Now()
		ids := make([]string, len(objs))
		for i, o := range objs {
			ids[i] = o.ID
		}
		rows, err := c.m.Rows(ctx, Selection{Namespace: c.o.Namespace, IDs: ids})
		if err != nil {
			return err
		}
		// An event created after the answer may have written a row before
		// it was read: up to the time since the answer.
		took := time.Since(answered)
		erased, err := c.erasedObjects(ctx, objs)
		if err != nil {
			return err
		}
		byID := make(map[string]*Row, len(rows))
		for i := range rows {
			byID[rows[i].ID] = &rows[i]
		}
		for i := range objs {
			c.seen[objs[i].ID] = true
			c.counts.Objects++
			c.compare(byID[objs[i].ID], &objs[i], objs[i].At, objs[i].At.Add(took+aheadSlack), erased[i])
		}
		c.progress()
		return nil
	})
	if err != nil {
		return err
	}
	sel := Selection{Namespace: c.o.Namespace, Since: c.o.Since, Limit: rowPage}
	for {
		rows, err := c.m.Rows(ctx, sel)
		if err != nil {
			return err
		}
		for i := range rows {
			if c.seen[rows[i].ID] {
				continue
			}
			if err := c.fetch(ctx, &rows[i]); err != nil {
				return err
			}
		}
		if len(rows) < sel.Limit {
			return nil
		}
		sel.After = rows[len(rows)-1].ID
	}
}

// fetch reads the object of a row the list did not return, and compares.
// The row was read before the provider answered: it is ahead when dated
// after the answer.
func (c *check) fetch(ctx context.Context, row *Row) error {
	asked := time.Unix(c.o.NowFunc().Unix(), 0)
	obj, err := c.m.Fetch(ctx, row.ID)
	var gone *GoneError
	switch {
	case errors.As(err, &gone):
		asked = gone.At
		fallthrough
	case errors.Is(err, ErrGone):
		c.compare(row, nil, asked, asked.Add(aheadSlack), false)
	case err != nil:
		return fmt.Errorf("fetch %s: %w", row.ID, err)
	default:
		c.counts.Objects++
		erased, err := c.erasedObjects(ctx, []Object{obj})
		if err != nil {
			return err
		}
		c.compare(row, &obj, obj.At, obj.At.Add(aheadSlack), erased[0])
	}
	c.progress()
	return nil
}

// erasedObjects says which of objs hold a subject erased in the
// namespace, as a string anywhere in their JSON.
func (c *check) erasedObjects(ctx context.Context, objs []Object) ([]bool, error) {
	out := make([]bool, len(objs))
	if c.o.Ledger == nil {
		return out, nil
	}
	strs := make([][]string, len(objs))
	var all []string
	for i, o := range objs {
		strs[i] = jsonStrings(o.Raw)
		all = append(all, strs[i]...)
	}
	erased, err := ledger.ErasedValues(ctx, c.o.Ledger, c.o.Namespace, all)
	if err != nil {
		return nil, err
	}
	for i := range objs {
		out[i] = slices.ContainsFunc(strs[i], func(s string) bool { return erased[s] })
	}
	return out, nil
}

// jsonStrings is every string token of raw, values and keys.
func jsonStrings(raw []byte) []string {
	var out []string
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		if s, ok := tok.(string); ok && s != "" {
			out = append(out, s)
		}
	}
}

// rowErased reports whether a module redacted a field of the row
// (ledger.Erased): erase found an erased subject in it.
func rowErased(row *Row) bool {
	if row == nil {
		return false
	}
	for _, v := range row.State {
		if v == ledger.Erased {
			return true
		}
	}
	return false
}

// compare records a finding when row and obj drifted, the provider having
// answered at at. A row dated after horizon is ahead. A row as new as
// the provider's answer (an event of that second or later was applied
// since) is newer than what the provider said: nothing to compare. A pair
// that drifted where the row is redacted or the object holds an erased
// subject (objErased) is reported apart, as erased.
func (c *check) compare(row *Row, obj *Object, at, horizon time.Time, objErased bool) {
	switch {
	case row == nil:
	case obj == nil:
		c.counts.Rows++
		c.counts.Gone++
	default:
		c.counts.Rows++
		c.counts.Matched++
	}
	f := Finding{Kind: c.m.Kind(), ObjectAt: at.UTC(), module: c.m, row: row, obj: obj}
	erased := objErased || rowErased(row)
	switch {
	case row != nil && row.At.After(horizon) && !erased:
		f.Drift = Ahead
	case row != nil && obj != nil && !row.At.Before(obj.At):
		return
	default:
		diffs, drifted := c.m.Compare(row, obj)
		if !drifted {
			return
		}
		f.Fields = diffs
		switch {
		case row == nil:
			f.Drift = MissingHere
		case obj == nil:
			f.Drift = MissingAtProvider
		default:
			f.Drift = Differs
		}
	}
	if row != nil {
		rowAt := row.At.UTC()
		f.ID, f.RowVersion, f.RowAt, f.RowEventID = row.ID, row.Version, &rowAt, row.EventID
	} else {
		f.ID = obj.ID
	}
	if erased {
		// The fields would show the subject: the provider's value.
		f.Fields = nil
		c.counts.Erased++
		c.r.Erased = append(c.r.Erased, f)
		return
	}
	c.counts.Drifted++
	c.r.Findings = append(c.r.Findings, f)
}

func (c *check) progress() {
	if c.o.Progress != nil {
		c.o.Progress(c.m.Kind(), *c.counts)
	}
}

// Drifted counts the report's findings per kind, every kind checked
// included (0 when in sync).
func (r *Report) Drifted() map[string]int {
	out := make(map[string]int, len(r.Checked))
	for kind, c := range r.Checked {
		out[kind] = c.Drifted
	}
	return out
}
