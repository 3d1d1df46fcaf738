package drift

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
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
)

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
	// ObjectAt is when the provider was asked.
	ObjectAt time.Time `json:"object_at"`

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
}

// Report is the outcome of one check of a namespace.
type Report struct {
	Namespace string             `json:"namespace"`
	Since     *time.Time         `json:"since,omitempty"`
	Checked   map[string]*Counts `json:"checked"`
	// Findings are the drifted objects, by kind and id.
	Findings []Finding `json:"drifted"`
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
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
}

// rowPage is how many stored rows are read at a time.
const rowPage = 500

// Check compares every module's stored rows of the namespace with the
// provider's objects. It stops at the first error (the provider failing
// after its retries, the database), returning what it found so far.
func Check(ctx context.Context, o Options) (*Report, error) {
	r := &Report{Namespace: o.Namespace, Checked: map[string]*Counts{}}
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
	slices.SortFunc(r.Findings, func(a, b Finding) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID)) })
	return r, err
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
		ids := make([]string, len(objs))
		for i, o := range objs {
			ids[i] = o.ID
		}
		rows, err := c.m.Rows(ctx, Selection{Namespace: c.o.Namespace, IDs: ids})
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
			c.compare(byID[objs[i].ID], &objs[i], objs[i].At)
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
func (c *check) fetch(ctx context.Context, row *Row) error {
	asked := time.Unix(c.o.NowFunc().Unix(), 0)
	obj, err := c.m.Fetch(ctx, row.ID)
	switch {
	case errors.Is(err, ErrGone):
		c.compare(row, nil, asked)
	case err != nil:
		return fmt.Errorf("fetch %s: %w", row.ID, err)
	default:
		c.counts.Objects++
		c.compare(row, &obj, obj.At)
	}
	c.progress()
	return nil
}

// compare records a finding when row and obj drifted. A row as new as the
// provider's answer (an event of that second or later was applied) is
// newer than what the provider said: nothing to compare.
func (c *check) compare(row *Row, obj *Object, at time.Time) {
	switch {
	case row == nil:
	case obj == nil:
		c.counts.Rows++
		c.counts.Gone++
	default:
		c.counts.Rows++
		c.counts.Matched++
		if !row.At.Before(obj.At) {
			return
		}
	}
	diffs, drifted := c.m.Compare(row, obj)
	if !drifted {
		return
	}
	f := Finding{Kind: c.m.Kind(), Fields: diffs, ObjectAt: at.UTC(), module: c.m, row: row, obj: obj}
	switch {
	case row == nil:
		f.ID, f.Drift = obj.ID, MissingHere
	case obj == nil:
		f.ID, f.Drift = row.ID, MissingAtProvider
	default:
		f.ID, f.Drift = row.ID, Differs
	}
	if row != nil {
		rowAt := row.At.UTC()
		f.RowVersion, f.RowAt = row.Version, &rowAt
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
