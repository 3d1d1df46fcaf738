package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// maxDepth is encoding/json's nesting limit, which decoding a delivery
// into a struct enforces too.
const maxDepth = 10000

// errSyntax is what scanMembers returns for a body that is not JSON.
var errSyntax = errors.New("invalid JSON")

// scanMembers checks that body is one JSON value, as strictly as
// encoding/json does, in a single pass and without decoding it, and calls
// fn with each member of the top-level object in order: its key (escapes
// resolved) and its raw value. Reading a few fields this way costs a
// fraction of decoding the body into a struct, which scans it twice. A top-level
// null has no members; any other value that is not an object is an error,
// as decoding it into a struct would be.
func scanMembers(body []byte, fn func(key, value []byte) error) error {
	s := scanner{b: body}
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		if err := s.container(1, fn); err != nil {
			return err
		}
	} else {
		start := s.i
		if err := s.value(0); err != nil {
			return err
		}
		if !bytes.Equal(s.b[start:s.i], []byte("null")) {
			return fmt.Errorf("%w: the body is not a JSON object", errSyntax)
		}
	}
	s.space()
	if s.i != len(s.b) {
		return s.fail("after the top-level value")
	}
	return nil
}

// member is a top-level member to read and where its value goes.
type member = Field

// decodeMembers reads the named top-level members of body as decoding it
// into a struct with those fields would: names match case-insensitively, a
// later occurrence overrides an earlier one and null leaves a value as it
// was. The whole body is checked (scanMembers).
func decodeMembers(body []byte, members ...member) error { return DecodeFields(body, members...) }

type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(where string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("%w: unexpected end of input", errSyntax)
	}
	return fmt.Errorf("%w: unexpected %q at offset %d %s", errSyntax, s.b[s.i], s.i, where)
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value inside a container at nesting depth.
func (s *scanner) value(depth int) error {
	if s.i >= len(s.b) {
		return s.fail("looking for a value")
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		return s.container(depth+1, nil)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("looking for a value")
}

// container scans an object or an array at nesting depth; fn, when set,
// gets each member of the object.
func (s *scanner) container(depth int, fn func(key, value []byte) error) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: exceeded max depth", errSyntax)
	}
	closer := byte(']')
	if s.b[s.i] == '{' {
		closer = '}'
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == closer {
		s.i++
		return nil
	}
	for {
		s.space()
		var key []byte
		if closer == '}' {
			start := s.i
			escaped, err := s.str()
			if err != nil {
				return err
			}
			if key = s.b[start+1 : s.i-1]; escaped && fn != nil {
				var k string
				if err := json.Unmarshal(s.b[start:s.i], &k); err != nil {
					return fmt.Errorf("%w: %v", errSyntax, err)
				}
				key = []byte(k)
			}
			s.space()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return s.fail("after an object key")
			}
			s.i++
			s.space()
		}
		start := s.i
		if err := s.value(depth); err != nil {
			return err
		}
		if fn != nil {
			if err := fn(key, s.b[start:s.i]); err != nil {
				return err
			}
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail("in an object or array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case closer:
			s.i++
			return nil
		default:
			return s.fail("after a value")
		}
	}
}

// str scans a string and says whether it holds escapes.
func (s *scanner) str() (bool, error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false, s.fail("looking for a string")
	}
	escaped := false
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return escaped, nil
		case c < 0x20:
			return false, s.fail("in a string")
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return false, s.fail("in a string escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for range 4 {
					s.i++
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return false, s.fail("in a \\u escape")
					}
				}
			default:
				return false, s.fail("in a string escape")
			}
		}
	}
	return false, s.fail("in a string")
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return s.fail("in a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("after a decimal point")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("in an exponent")
		}
	}
	return nil
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return s.fail("in a literal")
	}
	s.i += len(word)
	return nil
}

// Field is one top-level member for DecodeFields: its name and where its
// value goes. A *json.RawMessage receives the raw value without a copy or
// a second pass.
type Field struct {
	Name string
	Dst  any
}

// DecodeFields reads the named top-level members of a JSON object as
// decoding it into a struct with those fields would, in one pass that skips
// every other member without decoding it. Handlers use it to read the few
// fields they need from a large payload: a nested field is read by
// decoding its parent into a json.RawMessage and calling DecodeFields on
// that.
func DecodeFields(body []byte, fields ...Field) error {
	return scanMembers(body, func(key, value []byte) error {
		for _, f := range fields {
			if !bytes.EqualFold(key, []byte(f.Name)) {
				continue
			}
			if bytes.Equal(value, []byte("null")) {
				return nil
			}
			if raw, ok := f.Dst.(*json.RawMessage); ok {
				*raw = value
				return nil
			}
			return json.Unmarshal(value, f.Dst)
		}
		return nil
	})
}
