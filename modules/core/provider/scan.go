package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
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
	return scanObject(body, func(s *scanner, depth int, key []byte, _ int) error {
		start := s.i
		if err := s.value(depth); err != nil {
			return err
		}
		return fn(key, s.b[start:s.i])
	})
}

// scanObject is scanMembers with fn reading each top-level member's value
// itself.
func scanObject(body []byte, fn memberFunc) error {
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

// memberFunc reads one member of an object (its key resolved) or element
// of an array (its index) at nesting depth: it scans the value at s.i, as
// s.value(depth) does, and may read what it scanned.
type memberFunc func(s *scanner, depth int, key []byte, index int) error

// decodeMembers reads the named top-level members of body, those that
// identify the event, in the one pass that checks the whole body: as
// decoding it into a struct with those fields would (null leaves a value
// as it was), except that each must appear once and exactly so: a second
// occurrence, or one under another case, is refused, where decoding into a
// struct would take the last one case-insensitively and PostgreSQL's jsonb
// the last exact one, so that such a body would be claimed under one id
// and read under another. A parser that reads its identity this way needs
// no Provider.BodyKeys. (Handlers read payloads with Fields.)
func decodeMembers(body []byte, members ...member) error {
	var seen []bool // of the members met, made on the first one
	return scanObject(body, func(s *scanner, depth int, key []byte, _ int) error {
		var m *member
		for i := range members {
			if string(key) != members[i].Name {
				if bytes.EqualFold(key, []byte(members[i].Name)) {
					return fmt.Errorf("key %q is a case variant of %q, which identifies the event", key, members[i].Name)
				}
				continue
			}
			m = &members[i]
			if seen == nil {
				seen = make([]bool, len(members))
			}
			if seen[i] {
				return fmt.Errorf("key %q appears twice", m.Name)
			}
			seen[i] = true
			break
		}
		start := s.i
		if err := s.value(depth); err != nil {
			return err
		}
		if m == nil {
			return nil
		}
		return m.set(s.b[start:s.i])
	})
}

// member is a top-level member for decodeMembers: its name and where its
// value goes. A *json.RawMessage receives the raw value without a copy.
type member struct {
	Name string
	Dst  any
}

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

// isSpace and inString classify bytes for the scanner's inner loops: a
// table lookup per byte instead of a switch, in the loops that run over
// every byte of a pretty-printed body.
var isSpace, inString = func() (sp, str [256]bool) {
	for _, c := range []byte(" \t\n\r") {
		sp[c] = true
	}
	for c := range 256 {
		str[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return sp, str
}()

func (s *scanner) space() {
	b, i := s.b, s.i
	for i < len(b) && isSpace[b[i]] {
		i++
	}
	s.i = i
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
// reads each member or element.
func (s *scanner) container(depth int, fn memberFunc) error {
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
	for index := 0; ; index++ {
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
		var err error
		if fn != nil {
			err = fn(s, depth, key, index)
		} else {
			err = s.value(depth)
		}
		if err != nil {
			return err
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
		b, i := s.b, s.i
		for i < len(b) && inString[b[i]] {
			i++
		}
		if s.i = i; i == len(b) {
			break
		}
		switch c := b[i]; {
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

// set stores the raw value of f's member, as encoding/json would: null
// leaves the destination as it was, except a *json.RawMessage, which
// receives null as it receives any value.
func (f *member) set(value []byte) error {
	if dst, ok := f.Dst.(*json.RawMessage); ok {
		*dst = value
		return nil
	}
	if bytes.Equal(value, []byte("null")) {
		return nil
	}
	switch dst := f.Dst.(type) {
	case *string:
		// Most ids have no escapes: taken as they are, they skip
		// encoding/json's second scan and reflection.
		if value[0] == '"' {
			if v := value[1 : len(value)-1]; bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
				*dst = string(v)
				return nil
			}
		}
	case *int64:
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil {
			*dst = n
			return nil
		}
	}
	return json.Unmarshal(value, f.Dst)
}

// kind names the JSON type of a scanned value, as encoding/json's errors
// do.
func kind(v []byte) string {
	switch v[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case '{':
		return "object"
	}
	return "number"
}
