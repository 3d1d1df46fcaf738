package ledger

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// column is a struct field bound to a table column by its col tag.
type column struct {
	name string
	// ident is name quoted as an SQL identifier: "user" is a column too.
	ident string
	index []int
	// sqlType is the PostgreSQL type of the column's values: an array of
	// it binds the field's values.
	sqlType string
	// base is the Go type its values are bound as: the field's type, or
	// the one it is defined on (string for a type status string).
	base reflect.Type
	// subject marks a column that holds a subject erase can name (a
	// customer id): `col:"customer_id,subject"`.
	subject bool
}

// columnType returns the Go type a field of type t is bound as and its
// SQL type: strings, integers, bools (and types defined on them),
// time.Time and []byte.
func columnType(t reflect.Type) (base reflect.Type, sqlType string, ok bool) {
	switch {
	case t == reflect.TypeFor[time.Time]():
		return t, "timestamptz", true
	case t == reflect.TypeFor[[]byte]():
		return t, "bytea", true
	}
	switch t.Kind() {
	case reflect.String:
		return reflect.TypeFor[string](), "text", true
	case reflect.Int64, reflect.Int:
		return reflect.TypeFor[int64](), "bigint", true
	case reflect.Int32:
		return reflect.TypeFor[int32](), "integer", true
	case reflect.Bool:
		return reflect.TypeFor[bool](), "boolean", true
	}
	return nil, "", false
}

// columnsOf returns the columns the col tags of struct t name, in field
// order; untagged fields are not columns.
func columnsOf(t reflect.Type) ([]column, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s is not a struct of col-tagged fields", t)
	}
	var cols []column
	seen := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("col")
		if !ok {
			continue
		}
		name, option, _ := strings.Cut(tag, ",")
		base, sqlType, ok := columnType(sf.Type)
		switch {
		case !sf.IsExported():
			return nil, fmt.Errorf("%s.%s has a col tag but is unexported", t, sf.Name)
		case !ok:
			return nil, fmt.Errorf("%s.%s is a %s: a column is a string, an integer, a bool, a time.Time or a []byte", t, sf.Name, sf.Type)
		case name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != "":
			return nil, fmt.Errorf("%s.%s: column %q is not a lower-case SQL name", t, sf.Name, name)
		case option != "" && option != "subject":
			return nil, fmt.Errorf("%s.%s: unknown col option %q (the one option is subject)", t, sf.Name, option)
		case option == "subject" && sf.Type.Kind() != reflect.String:
			return nil, fmt.Errorf("%s.%s: a subject column is a string", t, sf.Name)
		case seen[name]:
			return nil, fmt.Errorf("%s.%s: column %q is named twice", t, sf.Name, name)
		}
		seen[name] = true
		cols = append(cols, column{name: name, ident: pgx.Identifier{name}.Sanitize(), index: sf.Index, sqlType: sqlType, base: base,
			subject: option == "subject"})
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%s: no field carries a col tag", t)
	}
	return cols, nil
}

// unnestSQL is the set of rows that arrays $first.. of cols' values make,
// as alias k: `unnest($1::text[], $2::bigint[]) AS k("namespace", "version")`.
func unnestSQL(cols []column, first int) string {
	var arrays, names strings.Builder
	for i, c := range cols {
		if i > 0 {
			arrays.WriteString(", ")
			names.WriteString(", ")
		}
		arrays.WriteString("$" + strconv.Itoa(first+i) + "::" + c.sqlType + "[]")
		names.WriteString(c.ident)
	}
	return "unnest(" + arrays.String() + ") AS k(" + names.String() + ")"
}

// columnArgs appends, for each of cols, the array of its values in rows
// (a slice of structs), field by field.
func columnArgs(args []any, cols []column, rows reflect.Value, field func(reflect.Value) reflect.Value) []any {
	for _, c := range cols {
		values := reflect.MakeSlice(reflect.SliceOf(c.base), rows.Len(), rows.Len())
		for i := range rows.Len() {
			values.Index(i).Set(field(rows.Index(i)).FieldByIndex(c.index).Convert(c.base))
		}
		args = append(args, values.Interface())
	}
	return args
}

// unnestColumns caches columnsOf for Unnest, by type.
var unnestColumns sync.Map // reflect.Type -> []column or error

// Unnest binds rows to a set-based statement: T is a struct whose fields'
// col tags name columns (`col:"amount_paid"`), and Unnest returns the
// statement's row source, `unnest($first::text[], ...) AS k("namespace",
// ...)` (names quoted: a column may be a reserved word, k."user"), with
// one argument per column, the array of that column's values
// in rows' order. Each array's SQL type comes from its field's Go type
// (string text, int64 and int bigint, int32 integer, bool boolean, and
// the types defined on them; time.Time timestamptz, []byte bytea), so a
// column cannot be bound to another's values or type:
//
//	from, args := ledger.Unnest(rows, 1)
//	tx.ExecContext(ctx, `INSERT INTO usage_total (namespace, customer_id, quantity)
//		SELECT k.namespace, k.customer_id, k.quantity FROM `+from+` ...`, args...)
//
// A T Unnest cannot bind (a tag on a field of another type) is a mistake
// in the module's code: it panics, which fails the apply that calls it.
func Unnest[T any](rows []T, first int) (from string, args []any) {
	t := reflect.TypeFor[T]()
	cached, ok := unnestColumns.Load(t)
	if !ok {
		cols, err := columnsOf(t)
		cached = any(cols)
		if err != nil {
			cached = err
		}
		unnestColumns.Store(t, cached)
	}
	cols, ok := cached.([]column)
	if !ok {
		panic(fmt.Sprintf("ledger.Unnest[%s]: %v", t, cached))
	}
	return unnestSQL(cols, first), columnArgs(nil, cols, reflect.ValueOf(rows), func(v reflect.Value) reflect.Value { return v })
}
