package provider

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nestedFields is what FuzzFieldsRead reads, as encoding/json reads it.
type nestedFields struct {
	Created int64 `json:"created"`
	Data    struct {
		Object struct {
			ID    string `json:"id"`
			Items struct {
				Data []struct {
					Price struct {
						ID string `json:"id"`
					} `json:"price"`
				} `json:"data"`
			} `json:"items"`
		} `json:"object"`
	} `json:"data"`
}

// nestedPaths is nestedFields as Fields reads it.
type nestedPaths struct {
	Created int64  `field:"created"`
	ID      string `field:"data.object.id"`
	Price   string `field:"data.object.items.data.0.price.id"`
}

var (
	nestedReader = FieldsOf[nestedPaths]()
	rawFields    = FieldsOf[struct {
		A json.RawMessage `field:"a"`
	}]()
)

// FuzzFieldsRead: Fields reads what decoding into a struct reads wherever
// encoding/json accepts the body and its keys are lower-case and unique in
// each object (elsewhere the two read differently: Fields as jsonb does,
// see TestFieldsReadAsJSONB and TestFieldsReadAsPostgreSQL), and refuses
// every body that is not JSON.
func FuzzFieldsRead(f *testing.F) {
	for _, seed := range []string{
		`{"created":1,"data":{"object":{"id":"sub_1","items":{"data":[{"price":{"id":"p1"}},{"price":{"id":"p2"}}]}}}}`,
		`{"data":null}`, `{"data":{"object":null}}`, `{"data":{"object":{"items":{"data":[]}}}}`,
		`{"data":{"object":{"items":{"data":[null,{"price":{"id":"p2"}}]}}}}`, `{"data":5}`, `{"data":[1]}`,
		`{"data":{"object":{"id":"a"}},"data":{"object":{"ID":"b"}}}`, `{"Data":{"OBJECT":{"id":"c"}}}`,
		`{"data":{"object":{"items":{"data":[{"price":{"id":"p"}},7]}}}}`, `{"data":{"object":{"id":"a",}}}`,
		`{"data":{"object":{"items":{"data":[{"price":"x"}]}}}}`, `{"created":"1"}`, `{"data":{"object":{"id":"\u0061"}}}`,
		`{"data":{"object":{"id":5}}}`, `{"data":{"object":{"id":""}}}`, "{\"data\":{\"object\":{\"id\":\"\xff\"}}}",
		`{"data":[{"object":{"id":"a"}}]}`, `{"data":{"object":{"items":{"data":{"price":{"id":"p"}}}}}}`,
		`{"created":-0}`, `{"created":9223372036854775808}`, `{"created":1.0}`, `{"created":1e2}`, `{"created":true}`,
		`{"d\u0061ta":{"object":{"id":"esc"}}}`, `[]`, `null`, ``, `{"data":{"object":{"id":"a"}}} x`,
	} {
		f.Add([]byte(seed))
	}
	addFixtures(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var want nestedFields
		wantErr := json.Unmarshal(body, &want)
		got, gotErr := nestedReader.Read(body)
		if !json.Valid(body) {
			require.Error(t, gotErr)
		}
		if wantErr != nil || casedOrRepeatedKeys(body) {
			return
		}
		require.NoError(t, gotErr)
		require.Equal(t, want.Created, got.Created)
		require.Equal(t, want.Data.Object.ID, got.ID)
		wantPrice := ""
		if len(want.Data.Object.Items.Data) > 0 {
			wantPrice = want.Data.Object.Items.Data[0].Price.ID
		}
		require.Equal(t, wantPrice, got.Price)
	})
}

// TestFieldsReadAsJSONB: a handler reads a member under its exact key, as
// payload::jsonb->'data'->'object'->>'status' does, never a case variant;
// of a repeated key the last one counts, as jsonb keeps it, and a repeated
// object replaces all that was read from the earlier one.
func TestFieldsReadAsJSONB(t *testing.T) {
	t.Parallel()
	type status struct {
		Status string `field:"data.object.status"`
		Plan   string `field:"data.object.plan"`
	}
	read := FieldsOf[status]()
	for body, want := range map[string]status{
		`{"data":{"object":{"status":"active","Status":"canceled"}}}`:                   {Status: "active"},
		`{"data":{"object":{"Status":"canceled"}}}`:                                     {},
		`{"data":{"object":{"status":"active","status":"canceled"}}}`:                   {Status: "canceled"},
		`{"data":{"object":{"status":"active","plan":"a"},"object":{"status":"past"}}}`: {Status: "past"},
		`{"data":{"object":{"status":"active","plan":"a","plan":"b"}}}`:                 {Status: "active", Plan: "b"},
		`{"data":{"object":{"status":"active"}},"data":null}`:                           {},
		`{"data":{"object":{"status":"active","status":null}}}`:                         {},
		`{"data":"a string","data":{"object":{"plan":"p"}}}`:                            {Plan: "p"},
		`{"data":{"object":[{"status":"in a list"}]}}`:                                  {},
	} {
		got, err := read.Read([]byte(body))
		require.NoError(t, err, body)
		require.Equal(t, want, got, body)
	}
}

// TestFieldsReadTypes: each field type takes its JSON type, null and
// absence give the zero value, and another JSON type is an error that
// names the member.
func TestFieldsReadTypes(t *testing.T) {
	t.Parallel()
	type typed struct {
		S   string          `field:"s"`
		ID  ExpandableID    `field:"id"`
		B   bool            `field:"b"`
		I   int64           `field:"i"`
		I32 int32           `field:"i32"`
		T   time.Time       `field:"t"`
		Raw json.RawMessage `field:"raw"`
		Sub struct {
			First string `field:"list.0"`
			Key0  string `field:"obj.0"`
		}
	}
	read := FieldsOf[typed]()
	got, err := read.Read([]byte(`{"s":"a\u00e9","id":{"id":"cus_1","object":"customer"},"b":true,"i":-5,"i32":7,` +
		`"t":"2024-04-12T13:16:10.444253Z","raw":{"x":[1]},"list":["first","second"],"obj":{"0":"zero"}}`))
	require.NoError(t, err)
	require.Equal(t, "aé", got.S)
	require.Equal(t, ExpandableID("cus_1"), got.ID)
	require.True(t, got.B)
	require.Equal(t, int64(-5), got.I)
	require.Equal(t, int32(7), got.I32)
	require.Equal(t, time.Date(2024, 4, 12, 13, 16, 10, 444253000, time.UTC), got.T)
	require.JSONEq(t, `{"x":[1]}`, string(got.Raw))
	require.Equal(t, "first", got.Sub.First)
	require.Equal(t, "zero", got.Sub.Key0)

	got, err = read.Read([]byte(`{"s":null,"id":"cus_2","b":null,"i":null,"t":"","raw":null}`))
	require.NoError(t, err)
	require.Equal(t, typed{ID: "cus_2", Raw: json.RawMessage("null")}, got)
	got, err = read.Read([]byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, typed{}, got)

	for body, member := range map[string]string{
		`{"s":5}`: "s", `{"id":[1]}`: "id", `{"id":{"id":5}}`: "id", `{"b":"true"}`: "b", `{"i":1.5}`: "i",
		`{"i":"5"}`: "i", `{"i32":4294967296}`: "i32", `{"t":"yesterday"}`: "t", `{"t":1}`: "t",
	} {
		_, err := read.Read([]byte(body))
		require.ErrorContains(t, err, member+": ", body)
	}
	for _, body := range []string{`[]`, `"s"`, `{"s":"a"`, `{"s":"a"} {}`, ``} {
		_, err := read.Read([]byte(body))
		require.Error(t, err, body)
	}
}

// TestFieldsOfRefusesWhatItCannotRead: a mistake in a handler's struct
// stops it at once, not at its first event.
func TestFieldsOfRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "provider.FieldsOf[int]: not a struct", func() { FieldsOf[int]() })
	require.Panics(t, func() {
		FieldsOf[struct {
			id string `field:"id"` //nolint:unused // the test's point
		}]()
	})
	require.Panics(t, func() {
		FieldsOf[struct {
			F float64 `field:"amount"`
		}]()
	})
	require.Panics(t, func() {
		FieldsOf[struct {
			ID string `field:"data..id"`
		}]()
	})
	require.Panics(t, func() {
		FieldsOf[struct{ ID string }]()
	})
	require.Panics(t, func() {
		FieldsOf[struct {
			ID string `field:"id,requird"`
		}]()
	})
}

// TestFieldsRequired: a required member that is absent, null or empty is
// an error naming its path; present, it reads as any other.
func TestFieldsRequired(t *testing.T) {
	t.Parallel()
	read := FieldsOf[struct {
		ID       string          `field:"data.object.id,required"`
		Created  int64           `field:"created,required"`
		Items    json.RawMessage `field:"data.object.items,required"`
		Optional string          `field:"data.object.description"`
	}]()
	got, err := read.Read([]byte(`{"created": 5, "data": {"object": {"id": "in_1", "items": []}}}`))
	require.NoError(t, err)
	require.Equal(t, "in_1", got.ID)
	for body, path := range map[string]string{
		`{"created": 5, "data": {"object": {"items": []}}}`:                             "data.object.id",
		`{"created": 5, "data": {"object": {"id": null, "items": []}}}`:                 "data.object.id",
		`{"created": 5, "data": {"object": {"id": "", "items": []}}}`:                   "data.object.id",
		`{"data": {"object": {"id": "in_1", "items": []}}}`:                             "created",
		`{"created": 5, "data": {"object": {"id": "in_1", "items": null}}}`:             "data.object.items",
		`{"created": 5, "data": {"object": {"id": "in_1"}}}`:                            "data.object.items",
		`{"created": 5, "data": {"object": {"id": "in_1", "items": []}, "object": {}}}`: "data.object.id",
	} {
		_, err := read.Read([]byte(body))
		require.ErrorIs(t, err, ErrMissing, body)
		require.ErrorContains(t, err, path+": required member is missing", body)
	}
}

func BenchmarkFieldsRead(b *testing.B) {
	body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	type sub struct {
		Created  int64        `field:"created"`
		ID       string       `field:"data.object.id"`
		Customer ExpandableID `field:"data.object.customer"`
		Status   string       `field:"data.object.status"`
		Price    string       `field:"data.object.items.data.0.price.id"`
		Plan     string       `field:"data.object.items.data.0.plan.id"`
	}
	read := FieldsOf[sub]()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := read.Read(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFieldsReadSlices: a slice of a struct reads every element of an
// array as a payload is read, and an error names the element.
func TestFieldsReadSlices(t *testing.T) {
	t.Parallel()
	type item struct {
		Key     string       `field:"lookup_key,required"`
		Feature ExpandableID `field:"feature"`
	}
	read := FieldsOf[struct {
		Items []item `field:"data.object.entitlements.data"`
	}]()
	got, err := read.Read([]byte(`{"data": {"object": {"entitlements": {"data": [
		{"lookup_key": "a", "feature": "feat_1"}, {"lookup_key": "b", "feature": {"id": "feat_2"}, "x": [1]}]}}}}`))
	require.NoError(t, err)
	require.Equal(t, []item{{"a", "feat_1"}, {"b", "feat_2"}}, got.Items)

	got, err = read.Read([]byte(`{"data": {"object": {"entitlements": {"data": []}}}}`))
	require.NoError(t, err)
	require.Empty(t, got.Items)
	got, err = read.Read([]byte(`{"data": {"object": {"entitlements": null}}}`))
	require.NoError(t, err)
	require.Nil(t, got.Items)

	for body, want := range map[string]string{
		`{"data": {"object": {"entitlements": {"data": [{"lookup_key": "a"}, {"feature": "f"}]}}}}`: "data.object.entitlements.data.1.lookup_key: required member is missing",
		`{"data": {"object": {"entitlements": {"data": [{"lookup_key": 7}]}}}}`:                     "data.object.entitlements.data.0.lookup_key: want a string, got number",
		`{"data": {"object": {"entitlements": {"data": ["a"]}}}}`:                                   "data.object.entitlements.data: element 0: want an object, got string",
		`{"data": {"object": {"entitlements": {"data": {"lookup_key": "a"}}}}}`:                     "data.object.entitlements.data: want an array, got object",
	} {
		_, err := read.Read([]byte(body))
		require.EqualError(t, err, want, body)
	}
	require.Panics(t, func() {
		FieldsOf[struct {
			Keys []string `field:"keys"`
		}]()
	})
}
