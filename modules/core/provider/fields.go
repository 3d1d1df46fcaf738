package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Fields reads the members of an event payload that a handler uses into a
// struct of the handler's own, T, in one pass over the payload that skips
// every other member without decoding it. It is the way handlers read
// payloads: build it once per struct type with FieldsOf, then call Read
// for each event.
//
// Each field of T that Read fills carries a tag naming its member by path,
// as PostgreSQL's #>> reads it:
//
//	type subEvent struct {
//		Created  int64               `field:"created,required"`
//		ID       string              `field:"data.object.id,required"`
//		Customer provider.ExpandableID `field:"data.object.customer"`
//		Plan     string              `field:"data.object.items.data.0.price.id"`
//	}
//
// A path is keys separated by dots; a step that is a number picks that
// element of an array (on an object it is a key, as in jsonb). Untagged
// struct fields are searched for tagged fields too, so a struct may keep
// the payload's nesting.
//
// Read gives the values that payload::jsonb gives in SQL for the same
// bytes: keys match exactly, never by case; when a key appears twice in an
// object the last one counts, as jsonb keeps it (a repeated object
// replaces everything read from the earlier one); where SQL reads NULL (the
// member is absent or null, or a step of the path is not an object or an
// array) the field keeps its zero value. A member whose JSON type is not
// the one its field takes is an error: a payload no retry can fix.
//
// A path followed by ",required" marks a member the handler cannot do
// without: Read fails with ErrMissing, naming the path, when it is absent,
// null or the zero value of its field ("", 0, false, the zero time).
//
// Field types: string; ExpandableID; bool; the signed integers (a JSON
// number that is an integer as jsonb keeps it: 1e2, not 1.0); time.Time (an RFC 3339 string; "" is the zero time);
// json.RawMessage (the member's raw bytes, null included, nil when
// absent: it shares the payload's memory); a slice of a struct whose
// fields carry tags too (an array, each element read as a payload is, its
// paths relative to the element; an error names the element by index:
// "data.object.items.2.id").
type Fields[T any] struct {
	reader
}

// reader reads a payload, or an element of an array in it, into a struct
// whose field tags name its members.
type reader struct {
	root node
	// required are the fields tagged required, in the struct's order.
	required []requiredField
}

// requiredField is a field whose member must be present with a value.
type requiredField struct {
	field []int
	path  string
}

// ErrMissing is Read's error for a required member that is absent, null
// or the zero value of its field; it comes wrapped with the member's path.
var ErrMissing = errors.New("required member is missing")

// ExpandableID is a field that reads an id that the provider sends as a
// string or, expanded, as an object with an "id" (a Stripe customer or
// payment_intent): "" for null or absent.
type ExpandableID string

// node is one step of the paths of a Fields: the member it names and the
// fields that receive its value or read further into it.
type node struct {
	name string
	// index is the array element the step names when its name is a
	// number, else -1.
	index    int
	path     string
	children []*node
	leaves   []leaf
}

// leaf is a field of T and how its value is read.
type leaf struct {
	field []int // reflect index of the field in T
	kind  leafKind
	// elem reads each element of a slice field's array.
	elem *reader
}

type leafKind int

const (
	leafString leafKind = iota
	leafExpandable
	leafBool
	leafInt
	leafTime
	leafRaw
	leafSlice
)

var (
	timeType       = reflect.TypeFor[time.Time]()
	rawType        = reflect.TypeFor[json.RawMessage]()
	expandableType = reflect.TypeFor[ExpandableID]()
)

// maxMembers bounds the members of one object a Fields names: Read tracks
// the members it has met in an object in a word.
const maxMembers = 64

// FieldsOf builds the reader of T. It panics on a struct it cannot read
// (a tag on an unexported field or a field of a type it does not take, a
// malformed path): a mistake in the handler's code, found when its package
// starts, as regexp.MustCompile does.
func FieldsOf[T any]() *Fields[T] {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("provider.FieldsOf[%s]: not a struct", t))
	}
	return &Fields[T]{reader: *newReader(t)}
}

// newReader builds the reader of struct t.
func newReader(t reflect.Type) *reader {
	rd := &reader{root: node{index: -1}}
	if n := rd.root.add(t, nil, &rd.required); n == 0 {
		panic(fmt.Sprintf("provider.FieldsOf[%s]: no field carries a field tag", t))
	}
	return rd
}

// add adds the tagged fields of struct t, whose index in T is at, and
// returns how many it added.
func (root *node) add(t reflect.Type, at []int, required *[]requiredField) int {
	added := 0
	for i := range t.NumField() {
		sf := t.Field(i)
		index := append(append([]int(nil), at...), i)
		tag, ok := sf.Tag.Lookup("field")
		if !ok {
			if sf.Type.Kind() == reflect.Struct && sf.Type != timeType {
				added += root.add(sf.Type, index, required)
			}
			continue
		}
		if !sf.IsExported() {
			panic(fmt.Sprintf("provider.FieldsOf: %s.%s has a field tag but is unexported", t, sf.Name))
		}
		kind, ok := kindOf(sf.Type)
		if !ok {
			panic(fmt.Sprintf("provider.FieldsOf: %s.%s is a %s, which Read does not fill", t, sf.Name, sf.Type))
		}
		tag, option, _ := strings.Cut(tag, ",")
		switch option {
		case "":
		case "required":
			*required = append(*required, requiredField{field: index, path: tag})
		default:
			panic(fmt.Sprintf("provider.FieldsOf: %s.%s: unknown tag option %q (the one option is required)", t, sf.Name, option))
		}
		n := root
		for _, step := range strings.Split(tag, ".") {
			if step == "" {
				panic(fmt.Sprintf("provider.FieldsOf: %s.%s: path %q has an empty step", t, sf.Name, tag))
			}
			n = n.child(step)
		}
		l := leaf{field: index, kind: kind}
		if kind == leafSlice {
			l.elem = newReader(sf.Type.Elem())
		}
		n.leaves = append(n.leaves, l)
		added++
	}
	return added
}

func kindOf(t reflect.Type) (leafKind, bool) {
	switch {
	case t == timeType:
		return leafTime, true
	case t == rawType:
		return leafRaw, true
	case t == expandableType:
		return leafExpandable, true
	}
	switch t.Kind() {
	case reflect.Slice:
		return leafSlice, t.Elem().Kind() == reflect.Struct && t.Elem() != timeType
	case reflect.String:
		return leafString, true
	case reflect.Bool:
		return leafBool, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return leafInt, true
	}
	return 0, false
}

// child returns n's step name, made when n has none yet.
func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	if len(n.children) == maxMembers {
		panic(fmt.Sprintf("provider.FieldsOf: more than %d members of %q", maxMembers, n.path))
	}
	c := &node{name: name, index: -1, path: name}
	if n.path != "" {
		c.path = n.path + "." + name
	}
	if i, err := strconv.Atoi(name); err == nil && i >= 0 && strconv.Itoa(i) == name {
		c.index = i
	}
	n.children = append(n.children, c)
	return c
}

// Read reads payload, a JSON object (or null, which has no members), into
// a T. It checks that the whole payload is JSON, as strictly as
// encoding/json does.
func (f *Fields[T]) Read(payload []byte) (T, error) {
	var out T
	if err := f.read(payload, reflect.ValueOf(&out).Elem()); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// read reads payload into dst, a struct of the reader's type.
func (rd *reader) read(payload []byte, dst reflect.Value) error {
	r := fieldReader{s: scanner{b: payload}, dst: dst}
	if err := r.top(&rd.root); err != nil {
		return err
	}
	for _, req := range rd.required {
		fv := dst.FieldByIndex(req.field)
		if fv.IsZero() || fv.Type() == rawType && string(fv.Bytes()) == "null" {
			return fmt.Errorf("%s: %w", req.path, ErrMissing)
		}
	}
	return nil
}

// fieldReader is one Read: the scanner over the payload and the T it
// fills.
type fieldReader struct {
	s   scanner
	dst reflect.Value
}

func (r *fieldReader) top(root *node) error {
	s := &r.s
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		if err := r.object(root, 1); err != nil {
			return err
		}
	} else {
		start := s.i
		if err := s.value(0); err != nil {
			return err
		}
		if !bytes.Equal(s.b[start:s.i], []byte("null")) {
			return fmt.Errorf("%w: the payload is not a JSON object", errSyntax)
		}
	}
	s.space()
	if s.i != len(s.b) {
		return s.fail("after the top-level value")
	}
	return nil
}

// object reads the object at the scanner, at nesting depth, whose members
// n's children name.
func (r *fieldReader) object(n *node, depth int) error {
	s := &r.s
	if depth > maxDepth {
		return fmt.Errorf("%w: exceeded max depth", errSyntax)
	}
	s.i++ // {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	var seen uint64 // the children met in this object
	for {
		s.space()
		start := s.i
		escaped, err := s.str()
		if err != nil {
			return err
		}
		key := s.b[start+1 : s.i-1]
		if escaped {
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
		c, bit := n.named(key)
		if c == nil {
			err = s.value(depth)
		} else {
			if seen&bit != 0 {
				// jsonb keeps the last of a repeated key: forget what the
				// earlier one gave.
				r.zero(c)
			}
			seen |= bit
			err = r.member(c, depth)
		}
		if err != nil {
			return err
		}
		if done, err := r.next('}'); done || err != nil {
			return err
		}
	}
}

// array reads the array at the scanner, at nesting depth, whose elements
// n's children name by index.
func (r *fieldReader) array(n *node, depth int) error {
	s := &r.s
	if depth > maxDepth {
		return fmt.Errorf("%w: exceeded max depth", errSyntax)
	}
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for i := 0; ; i++ {
		s.space()
		var err error
		if c := n.indexed(i); c != nil {
			err = r.member(c, depth)
		} else {
			err = s.value(depth)
		}
		if err != nil {
			return err
		}
		if done, err := r.next(']'); done || err != nil {
			return err
		}
	}
}

// next moves past the comma after a member or element, or past the
// closer that ends its container (done).
func (r *fieldReader) next(closer byte) (done bool, err error) {
	s := &r.s
	s.space()
	if s.i >= len(s.b) {
		return false, s.fail("in an object or array")
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case closer:
		s.i++
		return true, nil
	}
	return false, s.fail("after a value")
}

// member reads the value at the scanner, a member or element that n
// names, inside a container at depth.
func (r *fieldReader) member(n *node, depth int) error {
	s := &r.s
	if s.i >= len(s.b) {
		return s.fail("looking for a value")
	}
	start := s.i
	var err error
	switch c := s.b[s.i]; {
	case c == '{' && len(n.children) > 0:
		err = r.object(n, depth+1)
	case c == '[' && len(n.children) > 0:
		err = r.array(n, depth+1)
	default:
		err = s.value(depth)
	}
	if err != nil {
		return err
	}
	for _, l := range n.leaves {
		if err := r.set(l, s.b[start:s.i]); err != nil {
			if _, ok := err.(*elementError); ok {
				return fmt.Errorf("%s.%w", n.path, err) // "items.2.id: ..."
			}
			return fmt.Errorf("%s: %w", n.path, err)
		}
	}
	return nil
}

// named returns the child of n whose key is key, and its bit among n's
// children.
func (n *node) named(key []byte) (*node, uint64) {
	for i, c := range n.children {
		if c.name == string(key) {
			return c, 1 << i
		}
	}
	return nil, 0
}

// indexed returns the child of n that names element i.
func (n *node) indexed(i int) *node {
	for _, c := range n.children {
		if c.index == i {
			return c
		}
	}
	return nil
}

// zero gives every field under n its zero value again.
func (r *fieldReader) zero(n *node) {
	for _, l := range n.leaves {
		r.dst.FieldByIndex(l.field).SetZero()
	}
	for _, c := range n.children {
		r.zero(c)
	}
}

// set stores a member's raw value, already checked as JSON, in l's field.
func (r *fieldReader) set(l leaf, value []byte) error {
	fv := r.dst.FieldByIndex(l.field)
	if l.kind == leafRaw {
		fv.SetBytes(value)
		return nil
	}
	if value[0] == 'n' { // null: as SQL's NULL, the zero value
		fv.SetZero()
		return nil
	}
	switch l.kind {
	case leafSlice:
		return r.setSlice(l, fv, value)
	case leafString:
		s, err := jsonString(value)
		if err != nil {
			return err
		}
		fv.SetString(s)
	case leafExpandable:
		s, err := expandableID(value)
		if err != nil {
			return err
		}
		fv.SetString(s)
	case leafBool:
		if value[0] != 't' && value[0] != 'f' {
			return fmt.Errorf("want a boolean, got %s", kind(value))
		}
		fv.SetBool(value[0] == 't')
	case leafInt:
		if value[0] != '-' && (value[0] < '0' || value[0] > '9') {
			return fmt.Errorf("want an integer, got %s", kind(value))
		}
		n, ok := jsonInt(value, fv.Type().Bits())
		if !ok {
			return fmt.Errorf("want an integer of %d bits, got %s", fv.Type().Bits(), value)
		}
		fv.SetInt(n)
	case leafTime:
		s, err := jsonString(value)
		if err != nil {
			return err
		}
		if s == "" {
			fv.SetZero()
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("want an RFC 3339 time: %w", err)
		}
		*fv.Addr().Interface().(*time.Time) = t
	}
	return nil
}

// jsonInt reads a JSON number as an integer of bits bits, as
// (payload::jsonb->>'n')::bigint does: jsonb keeps a number's scale, so
// 1e2 is 100 and 1.0 is no integer.
func jsonInt(value []byte, bits int) (int64, bool) {
	if n, err := strconv.ParseInt(string(value), 10, bits); err == nil {
		return n, true
	}
	mantissa, exp, _ := strings.Cut(strings.ToLower(string(value)), "e")
	whole, frac, _ := strings.Cut(mantissa, ".")
	e, err := strconv.Atoi(exp)
	if exp == "" || err != nil || len(frac) > e || e-len(frac) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(whole+frac+strings.Repeat("0", e-len(frac)), 10, bits)
	return n, err == nil
}

// jsonString decodes a JSON string value.
func jsonString(value []byte) (string, error) {
	if value[0] != '"' {
		return "", fmt.Errorf("want a string, got %s", kind(value))
	}
	// Most strings a handler reads are ids without escapes: taken as they
	// are, they skip encoding/json's second scan.
	if v := value[1 : len(value)-1]; bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		return string(v), nil
	}
	var s string
	if err := json.Unmarshal(value, &s); err != nil {
		return "", err
	}
	return s, nil
}

// expandableID reads an id sent as a string or as an object's "id".
func expandableID(value []byte) (string, error) {
	if value[0] != '{' {
		return jsonString(value)
	}
	var id string
	err := scanMembers(value, func(key, v []byte) error {
		if string(key) != "id" {
			return nil
		}
		if v[0] == 'n' {
			id = ""
			return nil
		}
		var err error
		id, err = jsonString(v)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("id: %w", err)
	}
	return id, nil
}

// elementError is an error of element i of an array a slice field reads,
// named by its index.
type elementError struct {
	i   int
	err error
}

func (e *elementError) Error() string { return strconv.Itoa(e.i) + "." + e.err.Error() }
func (e *elementError) Unwrap() error { return e.err }

// setSlice reads value, an array already checked as JSON, into a slice
// field: each element into a struct as Read reads a payload.
func (r *fieldReader) setSlice(l leaf, fv reflect.Value, value []byte) error {
	if value[0] != '[' {
		return fmt.Errorf("want an array, got %s", kind(value))
	}
	s := scanner{b: value, i: 1}
	out := reflect.MakeSlice(fv.Type(), 0, 4)
	s.space()
	for i := 0; s.b[s.i] != ']'; i++ {
		start := s.i
		if err := s.value(1); err != nil {
			return err
		}
		if c := value[start]; c != '{' && c != 'n' {
			return fmt.Errorf("element %d: want an object, got %s", i, kind(value[start:s.i]))
		}
		elem := reflect.New(fv.Type().Elem()).Elem()
		if err := l.elem.read(value[start:s.i], elem); err != nil {
			return &elementError{i, err}
		}
		out = reflect.Append(out, elem)
		s.space()
		if s.b[s.i] == ',' {
			s.i++
			s.space()
		}
	}
	fv.Set(out)
	return nil
}
