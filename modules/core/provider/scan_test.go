package provider

import (
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

// FuzzScanMembers: reading a Stripe event's fields with scanMembers accepts
// and refuses exactly what decoding it with encoding/json does, and reads
// the same values.
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
	files, _ := filepath.Glob("../../../testdata/providers/*/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want stripeFields
		wantErr := json.Unmarshal(body, &want)
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
