package provider

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type stripeFields struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Created is Unix seconds or, in a thin event, an RFC 3339 string.
	Created json.RawMessage `json:"created"`
}

// FuzzScanMembers: reading a Stripe event's fields in one pass accepts and
// refuses exactly what decoding it with encoding/json and then checking its
// identifying keys on their own (checkKeys) does, and reads the same
// values.
func FuzzScanMembers(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1","type":"x","created":1}`, `null`, ` {} `, `[]`, `"s"`, `1`, ``, `{`, `{"id":"a",}`,
		`{"id":"a","ID":"b"}`, `{"Id":"a","id":null}`, `{"created":"x","created":1}`, `{"created":1.5}`,
		`{"created":1e3}`, `{"\u0069d":"esc"}`, `{"id":"\ud800"}`, "{\"id\":\"\xff\"}", `{"id":"a"} x`,
		`{"a":[1,2,{"b":[true,false,null]}],"id":"z"}`, `{"a":-0.5e+10}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`,
		`{"a":-}`, `{"a":tru}`, `{"a":"\x"}`, "{\"a\":\"\t\"}", `{"a":"\u12"}`, `{"a" "b"}`, `{"a":1 "b":2}`,
		`{"id":"evt_1"}{"id":"evt_2"}`, `{"id":123}`, `{"type":["x"]}`, `{"ſd":"long s"}`, "\ufeff{}",
		`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
		`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	} {
		f.Add([]byte(seed))
	}
	addFixtures(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var want stripeFields
		wantErr := json.Unmarshal(body, &want)
		if wantErr == nil {
			wantErr = checkKeys(body, []string{"id", "type", "created"})
		}
		if wantErr == nil {
			_, wantErr = stripeCreated(want.Created)
		}
		got, gotErr := parseStripe(nil, body)
		require.Equal(t, wantErr == nil, gotErr == nil, "encoding/json: %v; scanMembers: %v", wantErr, gotErr)
		if wantErr == nil {
			require.Equal(t, want.ID, got.ID)
			require.Equal(t, want.Type, got.Type)
		}
	})
}

// nestedFields is what FuzzDecodeNestedFields reads, as a struct.
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

// FuzzDecodeNestedFields: reading nested fields with DecodeFields in one
// pass reads what decoding into a struct reads wherever encoding/json
// accepts the body and its keys are lower-case and unique in each object
// (elsewhere the two read differently: DecodeFields as jsonb does, see
// TestDecodeFieldsReadsAsJSONB), and refuses every body that is not JSON.
func FuzzDecodeNestedFields(f *testing.F) {
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
	} {
		f.Add([]byte(seed))
	}
	addFixtures(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var want nestedFields
		wantErr := json.Unmarshal(body, &want)
		var (
			got   nestedFields
			price string
		)
		gotErr := DecodeFields(body, Field{Name: "created", Dst: &got.Created},
			Field{Name: "data", Fields: []Field{{Name: "object", Fields: []Field{{Name: "id", Dst: &got.Data.Object.ID},
				{Name: "items", Fields: []Field{{Name: "data", List: true, Fields: []Field{{Name: "price", Fields: []Field{{Name: "id", Dst: &price}}}}}}}}}}})
		if !json.Valid(body) {
			require.Error(t, gotErr)
		}
		if wantErr != nil || casedOrRepeatedKeys(body) {
			return
		}
		require.NoError(t, gotErr)
		require.Equal(t, want.Created, got.Created)
		require.Equal(t, want.Data.Object.ID, got.Data.Object.ID)
		wantPrice := ""
		if len(want.Data.Object.Items.Data) > 0 {
			wantPrice = want.Data.Object.Items.Data[0].Price.ID
		}
		require.Equal(t, wantPrice, price)
	})
}

// addFixtures seeds f with every real provider payload.
func addFixtures(f *testing.F) {
	files, _ := filepath.Glob("../../../testdata/providers/*/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
}

// TestDecodeFieldsRefusesWrongShapes: a nested field takes the shape its
// Go destination has, an object or a list, never the other, as encoding/json
// refuses an array for a struct and an object for a slice.
func TestDecodeFieldsRefusesWrongShapes(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"data":[{"object":{"id":"sub_1"}}]}`,
		`{"data":{"object":[{"id":"sub_1"}]}}`,
		`{"data":{"object":{"items":{"data":{"price":{"id":"p1"}}}}}}`,
		`{"data":{"object":{"items":[{"data":[]}]}}}`,
	} {
		var want nestedFields
		require.Error(t, json.Unmarshal([]byte(body), &want), body)
		var id, price string
		err := DecodeFields([]byte(body), Field{Name: "data", Fields: []Field{{Name: "object", Fields: []Field{{Name: "id", Dst: &id},
			{Name: "items", Fields: []Field{{Name: "data", List: true, Fields: []Field{{Name: "price", Fields: []Field{{Name: "id", Dst: &price}}}}}}}}}}})
		require.Error(t, err, body)
	}
}

// TestRawMessageReadsAsEncodingJSON: a *json.RawMessage receives what
// decoding into a struct gives it, null included.
func TestRawMessageReadsAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"a":null}`, `{}`, `{"a":{"b":null}}`, `{"a":[1]}`} {
		var want struct {
			A json.RawMessage `json:"a"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &want))
		var got json.RawMessage
		require.NoError(t, DecodeFields([]byte(body), Field{Name: "a", Dst: &got}))
		require.Equal(t, string(want.A), string(got), body)
	}
}

// casedOrRepeatedKeys reports whether an object of body holds a key with
// an upper-case letter (the fuzzed names are lower-case: encoding/json
// would match it, jsonb would not), or two keys that are equal, or equal
// but for case.
func casedOrRepeatedKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
			case '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.key {
				k := strings.ToLower(v)
				if k != v || top.keys[k] {
					return true
				}
				top.keys[k], top.key = true, false
				continue
			}
			if top != nil && top.object {
				top.key = true
			}
		default:
			if top != nil && top.object {
				top.key = true
			}
		}
	}
}

// TestDecodeFieldsReadsAsJSONB: a handler reads a nested field under its
// exact key, as payload::jsonb->'data'->'object'->>'status' does, never a
// case variant; a field it reads that appears twice in its object is an
// error, where encoding/json and jsonb would each pick one.
func TestDecodeFieldsReadsAsJSONB(t *testing.T) {
	t.Parallel()
	read := func(body string) (string, error) {
		var status string
		err := DecodeFields([]byte(body), Field{Name: "data", Fields: []Field{{Name: "object", Fields: []Field{{Name: "status", Dst: &status}}}}})
		return status, err
	}
	status, err := read(`{"data":{"object":{"status":"active","Status":"canceled"}}}`)
	require.NoError(t, err)
	require.Equal(t, "active", status, "the exact key, as jsonb")
	status, err = read(`{"data":{"object":{"Status":"canceled"}}}`)
	require.NoError(t, err)
	require.Empty(t, status, "no exact key: nothing, as jsonb")
	_, err = read(`{"data":{"object":{"status":"active","status":"canceled"}}}`)
	require.ErrorContains(t, err, `"status" appears twice`)
	_, err = read(`{"data":{"object":{"status":"active"},"object":{"status":"canceled"}}}`)
	require.ErrorContains(t, err, `"object" appears twice`)
	status, err = read(`{"data":{"object":{"status":"active","plan":"a","plan":"b"}}}`)
	require.NoError(t, err, "a duplicate of a member it does not read is not its concern")
	require.Equal(t, "active", status)
}
