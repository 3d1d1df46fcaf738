package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// IDFallback derives an event id for a source whose sender puts none where
// its provider does. It is the last resort: a configured header, else a
// value at a JSON path, else a SHA-256 of configured fields that stay the
// same on every retry of one event (never of the whole body, whose
// formatting or delivery metadata may change between retries).
type IDFallback struct {
	Header     string
	JSONPath   string
	HashFields []string
}

// ID returns the derived id, or "" when nothing configured is present.
func (f *IDFallback) ID(h http.Header, body []byte) (string, error) {
	id, _, err := f.derive(h, body)
	return id, err
}

// derive is ID that also says whether the id came from the header, which
// no signature covers.
func (f *IDFallback) derive(h http.Header, body []byte) (id string, unsigned bool, err error) {
	if f.Header != "" {
		if v := h.Get(f.Header); v != "" {
			return v, true, nil
		}
	}
	id, err = f.fromBody(body)
	return id, false, err
}

// fromBody derives the id from the signed body: a JSON path, else a hash
// of the configured fields.
func (f *IDFallback) fromBody(body []byte) (string, error) {
	if f.JSONPath == "" && len(f.HashFields) == 0 {
		return "", nil
	}
	// Numbers stay as their exact text: through float64, integers above
	// 2^53 would collapse and two events could hash alike.
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return "", payloadError("body is not JSON: %v", err)
	}
	if f.JSONPath != "" {
		if v, ok := lookup(doc, f.JSONPath); ok {
			if s := scalar(v); s != "" {
				return s, nil
			}
		}
	}
	if len(f.HashFields) == 0 {
		return "", nil
	}
	sum := sha256.New()
	found := false
	for _, path := range f.HashFields {
		v, ok := lookup(doc, path)
		if !ok {
			// Absent is not null: {"a":null} and {} are different events.
			fmt.Fprintf(sum, "%s absent\n", path)
			continue
		}
		found = true
		canon, _ := json.Marshal(v) // maps marshal with sorted keys, json.Number as its text
		fmt.Fprintf(sum, "%s=%s\n", path, canon)
	}
	if !found {
		return "", nil
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// lookup walks a dot path ("data.object.id", "items.0.id").
func lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, part := range strings.Split(path, ".") {
		switch node := cur.(type) {
		case map[string]any:
			v, ok := node[part]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			cur = node[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}
