package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Latest is a module's table of the latest state of objects: one row per
// key, which events write in precedence order (the version, then the
// module's tie-break) whatever order they arrive in. The module declares
// the precedence once; Latest makes from it both the fold of one apply's
// events of a key and the guard of the one set-based upsert that writes
// them, so the two cannot disagree: folding a batch first and writing
// once leaves the row that writing each event alone would.
//
// K is the table's unique key and V the rest of a row, structs whose
// fields' col tags name their columns (`col:"external_id"`), bound as
// Unnest binds them. K's first column is namespace, and every field of K
// is a column. Every column of V is in the precedence, so any two states
// of a key are ordered; V's untagged fields are carried through the fold
// but not written. The table has an updated_at column, set when a row
// moves.
//
// One column may hold an erasable subject (`col:"customer_id,subject"`):
// in V, a subject erased in the namespace is written redacted (Erased)
// and erase redacts it in stored rows, and it comes last in the
// precedence, so that it never decides between two states (the fold sees
// it before it is redacted); in K, a row of an erased subject is not
// written and erase deletes its rows. Names are quoted in the statements:
// a column may be a reserved word.
type Latest[K comparable, V any] struct {
	spec         LatestOf[K, V]
	write        *Write[K, V]
	keys, values []column
	order        []orderColumn
	subject      *column
	subjectInKey bool
	// table is the table's name quoted; orderBy its key columns'.
	table, orderBy string
	upsert         string
}

// LatestOf is what a module declares of a Latest table.
type LatestOf[K comparable, V any] struct {
	// Table is the table's name.
	Table string
	// Precedence orders two states of one key, column by column, the
	// first the version: the greater state is kept. Strings compare byte
	// by byte (as COLLATE "C"), integers and bools as numbers; a tie on
	// every column keeps the stored row.
	Precedence []Order
	// Moved, when set, is called after the upsert with the entries whose
	// row it wrote (the newer ones), in key order, their subject as the
	// row holds it (redacted when erased): for what follows a state, such
	// as replacing another table's rows.
	Moved func(ctx context.Context, tx *Tx, moved []Entry[K, V]) error
}

// Order is one column of a precedence: By or ByRank.
type Order struct {
	column string
	rank   map[string]int
}

// By orders states by column.
func By(column string) Order { return Order{column: column} }

// ByRank orders states by the rank of a string column's value, a value
// rank does not name ranking 0: the order of a status's lifecycle
// ("draft" before "open" before "paid").
func ByRank(column string, rank map[string]int) Order { return Order{column: column, rank: rank} }

// orderColumn is an Order resolved against V's columns.
type orderColumn struct {
	column
	rank map[string]int
}

// NewLatest registers a module's Latest table: its staged write (whose
// failures name the module, "invoice.Flush") and, when a column holds a
// subject, its erase. A declaration NewLatest cannot use makes NewRiver
// fail, so the process does not start.
func NewLatest[K comparable, V any](reg *Registry, spec LatestOf[K, V]) *Latest[K, V] {
	module := "ledger"
	if pc, _, _, ok := runtime.Caller(1); ok {
		module, _ = splitFuncName(runtime.FuncForPC(pc).Name())
	}
	l := &Latest[K, V]{spec: spec}
	if err := l.build(); err != nil {
		reg.errs = append(reg.errs, fmt.Errorf("latest %s of module %s: %w", spec.Table, module, err))
	}
	l.write = newWrite(reg, WriteFuncs[K, V]{Merge: l.merge, Flush: l.flush}, module+".Flush")
	if l.subject != nil {
		reg.erasers = append(reg.erasers, eraser{fn: l.erase, module: module})
	}
	return l
}

// Put stages v as key's state in tx's apply.
func (l *Latest[K, V]) Put(tx *Tx, key K, v V) { l.write.Put(tx, key, v) }

// build resolves the declaration and writes the upsert.
func (l *Latest[K, V]) build() error {
	var err error
	if l.keys, err = columnsOf(reflect.TypeFor[K]()); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if l.values, err = columnsOf(reflect.TypeFor[V]()); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	switch {
	case l.spec.Table == "" || strings.Trim(l.spec.Table, "abcdefghijklmnopqrstuvwxyz0123456789_") != "":
		return fmt.Errorf("table %q is not a lower-case SQL name", l.spec.Table)
	case len(l.keys) != reflect.TypeFor[K]().NumField():
		return errors.New("every field of the key is a column")
	case l.keys[0].name != "namespace":
		return errors.New("the key's first column is namespace")
	case len(l.spec.Precedence) == 0:
		return errors.New("a precedence, starting with the version, is required")
	}
	l.table, l.orderBy = pgx.Identifier{l.spec.Table}.Sanitize(), names(l.keys, "")
	for _, v := range l.values {
		switch {
		case columnIndex(l.keys, v.name) >= 0:
			return fmt.Errorf("column %q is in the key and in the value", v.name)
		case v.name == "id" || v.name == "updated_at":
			return fmt.Errorf("column %q is the table's own, not the module's", v.name)
		}
	}
	used := map[string]bool{}
	for _, o := range l.spec.Precedence {
		i := columnIndex(l.values, o.column)
		switch {
		case i < 0:
			return fmt.Errorf("precedence column %q is not a column of the value", o.column)
		case o.rank != nil && l.values[i].sqlType != "text":
			return fmt.Errorf("precedence column %q is ranked but not a string", o.column)
		case l.values[i].sqlType != "text" && l.values[i].sqlType != "bigint" &&
			l.values[i].sqlType != "integer" && l.values[i].sqlType != "boolean":
			return fmt.Errorf("precedence column %q: only strings, integers and bools order states", o.column)
		}
		used[o.column] = true
		l.order = append(l.order, orderColumn{l.values[i], o.rank})
	}
	for _, c := range l.values {
		if !used[c.name] {
			return fmt.Errorf("column %q is not in the precedence: two states differing only there would be written in arrival order", c.name)
		}
	}
	for i, cols := range [][]column{l.keys, l.values} {
		for j := range cols {
			if !cols[j].subject {
				continue
			}
			if l.subject != nil {
				return errors.New("one column holds the subject")
			}
			l.subject, l.subjectInKey = &cols[j], i == 0
		}
	}
	if l.subject != nil && !l.subjectInKey && l.order[len(l.order)-1].name != l.subject.name {
		return fmt.Errorf("the subject column %q comes last in the precedence: an erased subject is written redacted, "+
			"so it must never decide between two states (put a column that tells events apart, event_id, before it)", l.subject.name)
	}
	l.upsert = l.upsertSQL()
	return nil
}

// columnIndex is the index of the column named name in cols, or -1.
func columnIndex(cols []column, name string) int {
	for i, c := range cols {
		if c.name == name {
			return i
		}
	}
	return -1
}

// names is cols' quoted names, each after prefix, comma-separated.
func names(cols []column, prefix string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = prefix + c.ident
	}
	return strings.Join(out, ", ")
}

// precedenceSQL is the precedence of the row alias r, as an SQL row.
func (l *Latest[K, V]) precedenceSQL(r string) string {
	parts := make([]string, len(l.order))
	for i, o := range l.order {
		col := r + "." + o.ident
		switch {
		case o.rank != nil:
			var b strings.Builder
			b.WriteString("CASE " + col)
			for _, v := range slices.Sorted(maps.Keys(o.rank)) {
				b.WriteString(" WHEN '" + strings.ReplaceAll(v, "'", "''") + "' THEN " + strconv.Itoa(o.rank[v]))
			}
			b.WriteString(" ELSE 0 END")
			parts[i] = b.String()
		case o.sqlType == "text":
			parts[i] = col + ` COLLATE "C"`
		default:
			parts[i] = col
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// upsertSQL is the statement flush runs: the rows of the apply, from
// arrays, inserted, or written over a stored row of lower precedence.
func (l *Latest[K, V]) upsertSQL() string {
	all := append(append([]column(nil), l.keys...), l.values...)
	selected := make([]string, len(all))
	for i, c := range all {
		selected[i] = "k." + c.ident
		if c.subject && !l.subjectInKey {
			selected[i] = RedactErasedSQL("k.namespace", "k."+c.ident)
		}
	}
	var where string
	if l.subject != nil && l.subjectInKey {
		where = "\nWHERE NOT " + ErasedSQL("k.namespace", "k."+l.subject.ident)
	}
	set := make([]string, len(l.values))
	for i, c := range l.values {
		set[i] = c.ident + " = EXCLUDED." + c.ident
	}
	q := "INSERT INTO " + l.table + " AS r (" + names(all, "") + ")\n" +
		"SELECT " + strings.Join(selected, ", ") + "\nFROM " + unnestSQL(all, 1) + where + "\n" +
		"ON CONFLICT (" + l.orderBy + ") DO UPDATE SET " + strings.Join(set, ", ") + ", updated_at = CURRENT_TIMESTAMP\n" +
		"WHERE " + l.precedenceSQL("r") + " < " + l.precedenceSQL("EXCLUDED")
	if l.spec.Moved != nil {
		q += "\nRETURNING " + names(l.keys, "r.")
		if l.subject != nil && !l.subjectInKey {
			q += ", r." + l.subject.ident // as written: redacted when erased
		}
	}
	return q
}

// compare orders two states of one key by the precedence.
func (l *Latest[K, V]) compare(a, b V) int {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for _, o := range l.order {
		fa, fb := va.FieldByIndex(o.index), vb.FieldByIndex(o.index)
		var c int
		switch {
		case o.rank != nil:
			c = cmp.Compare(o.rank[fa.String()], o.rank[fb.String()])
		case o.sqlType == "text":
			c = strings.Compare(fa.String(), fb.String())
		case o.sqlType == "boolean":
			c = cmp.Compare(b2i(fa.Bool()), b2i(fb.Bool()))
		default:
			c = cmp.Compare(fa.Int(), fb.Int())
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// merge is the fold: of two states of a key, the one of greater
// precedence; the older on a tie, as the upsert's guard keeps the stored
// row.
func (l *Latest[K, V]) merge(older, newer V) V {
	if l.compare(older, newer) < 0 {
		return newer
	}
	return older
}

// flush writes an apply's states in one statement, keys sorted by the
// core, and hands the rows it moved to Moved.
func (l *Latest[K, V]) flush(ctx context.Context, tx *Tx, entries []Entry[K, V]) error {
	rv := reflect.ValueOf(entries)
	args := columnArgs(nil, l.keys, rv, func(e reflect.Value) reflect.Value { return e.Field(0) })
	args = columnArgs(args, l.values, rv, func(e reflect.Value) reflect.Value { return e.Field(1) })
	if l.spec.Moved == nil {
		if _, err := tx.ExecContext(ctx, l.upsert, args...); err != nil {
			return fmt.Errorf("write %d %s row(s): %w", len(entries), l.spec.Table, err)
		}
		return nil
	}
	moved, err := l.upsertMoved(ctx, tx, args)
	if err != nil {
		return fmt.Errorf("write %d %s row(s): %w", len(entries), l.spec.Table, err)
	}
	var out []Entry[K, V]
	for _, e := range entries {
		written, ok := moved[e.Key]
		if !ok {
			continue
		}
		if l.subject != nil && !l.subjectInKey {
			// Moved sees the subject as the row holds it.
			reflect.ValueOf(&e.Value).Elem().FieldByIndex(l.subject.index).SetString(written)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil
	}
	return l.spec.Moved(ctx, tx, out)
}

// upsertMoved runs the upsert and returns the keys of the rows it wrote,
// each with the subject its row holds when the value has one.
func (l *Latest[K, V]) upsertMoved(ctx context.Context, tx *Tx, args []any) (map[K]string, error) {
	rows, err := tx.QueryContext(ctx, l.upsert, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	moved := map[K]string{}
	dest := make([]any, len(l.keys), len(l.keys)+1)
	for i, c := range l.keys {
		dest[i] = reflect.New(c.base).Interface()
	}
	var subject string
	if l.subject != nil && !l.subjectInKey {
		dest = append(dest, &subject)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		var k K
		kv := reflect.ValueOf(&k).Elem()
		for i, c := range l.keys {
			f := kv.FieldByIndex(c.index)
			f.Set(reflect.ValueOf(dest[i]).Elem().Convert(f.Type()))
		}
		moved[k] = subject
	}
	return moved, rows.Err()
}

// erase redacts the subject's column in its rows, or deletes its rows
// when the subject is part of the key, in namespace (every one when
// empty), locking the rows in key order, the order an apply's write takes
// them in.
func (l *Latest[K, V]) erase(ctx context.Context, tx *Tx, subject, namespace string, _ bool) (int64, error) {
	if !l.subjectInKey {
		return RedactRows(ctx, tx, l.table, l.subject.ident, l.orderBy, subject, namespace)
	}
	res, err := tx.ExecContext(ctx, `
		WITH hit AS (
			SELECT id FROM `+l.table+` WHERE `+l.subject.ident+` = $1 AND ($2 = '' OR namespace = $2)
			ORDER BY `+l.orderBy+` FOR UPDATE)
		DELETE FROM `+l.table+` t USING hit WHERE t.id = hit.id`, subject, namespace)
	if err != nil {
		return 0, fmt.Errorf("erase %s: %w", l.spec.Table, err)
	}
	return res.RowsAffected()
}
