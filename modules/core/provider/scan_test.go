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

// addFixtures seeds f with every real provider payload.
func addFixtures(f *testing.F) {
	files, _ := filepath.Glob("../../../testdata/providers/*/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
}

// TestRawMessageReadsAsEncodingJSON: a *json.RawMessage receives what
// decoding into a struct gives it, null included, from decodeMembers and
// from Fields alike.
func TestRawMessageReadsAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"a":null}`, `{}`, `{"a":{"b":null}}`, `{"a":[1]}`} {
		var want struct {
			A json.RawMessage `json:"a"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &want))
		var got json.RawMessage
		require.NoError(t, decodeMembers([]byte(body), member{Name: "a", Dst: &got}))
		require.Equal(t, string(want.A), string(got), body)
		read, err := rawFields.Read([]byte(body))
		require.NoError(t, err)
		require.Equal(t, string(want.A), string(read.A), body)
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
