package drift

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Module is what a feature module implements to have its rows of one
// provider's objects checked against that provider.
type Module interface {
	// Kind names the module's objects in reports and in
	// hookledger_drift_objects{kind} ("subscription").
	Kind() string
	// List calls page with the provider's objects, a page at a time: those
	// created at or after since, or all of them when since is zero.
	List(ctx context.Context, since time.Time, page func([]Object) error) error
	// Fetch reads one object by id; the error wraps ErrGone when the
	// provider has no such object.
	Fetch(ctx context.Context, id string) (Object, error)
	// Rows reads the stored rows a selection names.
	Rows(ctx context.Context, sel Selection) ([]Row, error)
	// Compare says whether a stored row and the provider's object disagree
	// in a way that matters, and in which fields. Either may be nil: no
	// row here, or no object at the provider.
	Compare(row *Row, obj *Object) (diffs []Diff, drifted bool)
	// Repair returns the provider event that brings the row to obj when
	// the module's own handlers apply it (obj nil: the provider has no such
	// object), or an error wrapping ErrCannotRepair saying why none can.
	Repair(row *Row, obj *Object) (Repair, error)
}

// State is an object or a row field by field, as text, in the module's own
// terms (the provider's subscription status, an amount in minor units).
type State map[string]string

// Object is one provider object as the provider's API answered it.
type Object struct {
	ID    string
	State State
	// Raw is the object's JSON as the API answered it: a repair's object.
	Raw json.RawMessage
	// At is when the provider answered, to the second, by the provider's
	// clock (StripeGet reads the answer's Date): the object is at least as
	// new as every event the provider created before it.
	At time.Time
}

// Row is a module's stored row of one provider object.
type Row struct {
	ID    string
	State State
	// Version is the row's version in the module's unit; At is the same
	// moment as a time.
	Version int64
	At      time.Time
	// EventID is the ledger event that last wrote the row, when the
	// module keeps it: the report marks a row a replayed event wrote.
	EventID string
}

// Selection names stored rows of a namespace: those with the given ids,
// or, with IDs nil, up to Limit rows written at or after Since whose id
// sorts after After, in id order.
type Selection struct {
	Namespace string
	IDs       []string
	Since     time.Time
	After     string
	Limit     int
}

// Diff is one field whose stored value differs from the provider's.
type Diff struct {
	Field    string `json:"field"`
	Stored   string `json:"stored"`
	Provider string `json:"provider"`
}

// Repair is a provider event of the module's that, applied by its own
// handlers, repairs a row: its type and the object it carries. The event
// around it (id, created) is Fix's.
type Repair struct {
	Type   string
	Object json.RawMessage
}

// ErrGone is what Module.Fetch wraps when the provider has no such object.
var ErrGone = errors.New("the provider has no such object")

// ErrCannotRepair is what Module.Repair wraps when no event of the module
// can repair a row.
var ErrCannotRepair = errors.New("cannot repair")

// Fields compares the named fields of a stored and a provider state, in
// the order named.
func Fields(stored, provider State, names ...string) []Diff {
	var out []Diff
	for _, n := range names {
		if stored[n] != provider[n] {
			out = append(out, Diff{Field: n, Stored: stored[n], Provider: provider[n]})
		}
	}
	return out
}
