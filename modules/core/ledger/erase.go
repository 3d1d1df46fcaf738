package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErasedPayload is what an erased row's payload becomes: it keeps its
// namespace, event id, type, times, status and digest, so a redelivery is
// still a duplicate, and nothing of the subject.
const ErasedPayload = `{"hookledger":"erased"}`

// Erased is what a redacted text column holds: the ledger's last_error
// that quoted the subject, and a module's column that held it (a
// customer id). It is not empty, so a merge that fills an empty column
// does not fill it again from a late event.
const Erased = "(erased)"

// RedactRows is the body of the erase hook of a module that keeps its rows
// and holds the subject in one column: it sets column to Erased in the
// rows of table whose column is subject (in namespace; all when empty),
// locking them in the order of orderBy, the order the module's writes lock
// them in, and says how many it changed. table, column and orderBy are the
// module's own identifiers, never input.
func RedactRows(ctx context.Context, tx *Tx, table, column, orderBy, subject, namespace string) (int64, error) {
	res, err := tx.ExecContext(ctx, `
		WITH hit AS (
			SELECT id FROM `+table+` WHERE `+column+` = $1 AND ($2 = '' OR namespace = $2)
			ORDER BY `+orderBy+` FOR UPDATE)
		UPDATE `+table+` t SET `+column+` = $3 FROM hit WHERE t.id = hit.id`,
		subject, namespace, Erased)
	if err != nil {
		return 0, fmt.Errorf("redact %s.%s: %w", table, column, err)
	}
	return res.RowsAffected()
}

// EraseMatch is a ledger row whose payload holds the subject.
type EraseMatch struct {
	EventKey
	Type       string    `json:"event_type"`
	Status     string    `json:"status"`
	ReceivedAt time.Time `json:"received_at"`

	id     int64
	erased bool
}

// EraseReport says what Erase found or did.
type EraseReport struct {
	// Rows are the rows whose payload was (or, dry, would be) erased.
	Rows []EraseMatch `json:"rows"`
	// Pending are rows that hold the subject but are not settled or
	// discarded (ErrNotSettled), as they are after the erase: erasing them
	// would apply a redaction marker; and rows an apply job still runs on,
	// whose error River writes when it ends. Settle or discard them, or
	// let the job end, then erase again.
	Pending []EraseMatch `json:"pending"`
	// Unreadable are the rows in scope whose payload no key opens
	// (CheckSealed): erase could not read them, and left them as they
	// are. They open, and erase reads them, once their key is back.
	Unreadable []UnreadablePayload `json:"unreadable"`
	// Quoting are those of Unreadable whose readable columns (headers,
	// last error, discard reason, failure history) hold the subject: their
	// payload may well hold it too.
	Quoting []EventKey `json:"quoting"`
}

// eraseBatch is how many rows one erase statement looks at.
const eraseBatch = 1000

// mayHoldSubjectSQL is true for every plaintext payload that may hold the
// subject $3 as Holds reads it, and false for most that do not, so that
// erase reads only those: the rule itself is Holds alone, for plaintext
// and sealed payloads alike. A JSON string equal to the subject is
// written as the subject itself or with escapes (a backslash); a form
// field that decodes to it, or to a text or JSON holding it, is the
// subject itself or has percent-escapes or '+'. The whitespace JSON
// allows before a body is what Holds skips too.
const mayHoldSubjectSQL = `CASE
	WHEN left(ltrim(payload, E' \t\r\n'), 1) IN ('{', '[') THEN strpos(payload, $3) > 0 OR strpos(payload, '\') > 0
	ELSE strpos(payload, $3) > 0 OR strpos(payload, '%') > 0 OR strpos(payload, '+') > 0 END`

// Erase records subject as erased in namespace (erased_subject, its
// digest), then replaces, in every ledger row of namespace (all when
// empty) whose payload holds subject (Holds, on the plaintext or the
// opened sealed payload: one rule for both), the payload by ErasedPayload and the
// headers by none, redacts a last error, failure history entry, discard
// reason or River job error of its apply jobs that quotes it, and records
// erased_at; with dryRun it only lists them. Rows still to be
// applied are listed as Pending and left alone; rows whose sealed payload
// no key opens, as Unreadable. It works in batches of
// rows, each its own statement, so it can run on a live ledger.
func (s *Store) Erase(ctx context.Context, subject, namespace string, dryRun bool) (EraseReport, error) {
	var r EraseReport
	if subject == "" {
		return r, errors.New("erase: an empty subject matches every payload")
	}
	if !dryRun {
		// Recorded first: from here on, drift, the re-fetch, replay and
		// the modules' writes do not write it back.
		if err := s.recordErased(ctx, subject, namespace); err != nil {
			return r, err
		}
	}
	// A batch of the rows that may hold the subject: sealed payloads,
	// opened here (one no key opens is passed by, and reported), and the
	// plaintext ones mayHoldSubjectSQL lets through; Holds decides.
	for after := int64(0); ; {
		batch, unreadable, last, err := s.openStored(ctx, after, eraseBatch,
			`($2 = '' OR namespace = $2) AND erased_at IS NULL AND (payload LIKE '`+sealedPrefix+`%' OR `+mayHoldSubjectSQL+`)`, namespace, subject)
		if err != nil {
			return r, fmt.Errorf("erase: %w", err)
		}
		r.Unreadable = append(r.Unreadable, unreadable...)
		var ids []int64
		for _, p := range batch {
			if Holds(p.plain, subject) {
				ids = append(ids, p.id)
			}
		}
		if len(ids) > 0 {
			hits, _, err := s.eraseBatch(ctx, subject, dryRun, `WITH hit AS (SELECT unnest($3::bigint[]) AS id)`, ids)
			if err != nil {
				return r, err
			}
			r.add(hits)
		}
		if last == 0 {
			break
		}
		after = last
	}
	var err error
	r.Quoting, err = s.quoting(ctx, r.Unreadable, subject)
	return r, err
}

// quoting returns the rows of unreadable whose readable columns hold
// subject: its headers, last error, discard reason or failure history.
func (s *Store) quoting(ctx context.Context, unreadable []UnreadablePayload, subject string) ([]EventKey, error) {
	if len(unreadable) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(unreadable))
	for i, u := range unreadable {
		ids[i] = u.id
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT namespace, event_id FROM webhook_event
		WHERE id = ANY($1) AND (strpos(coalesce(headers::text, ''), $2) > 0 OR strpos(coalesce(last_error, ''), $2) > 0
			OR strpos(coalesce(discard_reason, ''), $2) > 0 OR strpos(coalesce(failure_log::text, ''), $2) > 0)
		ORDER BY id`, ids, subject)
	if err != nil {
		return nil, fmt.Errorf("erase: read the unreadable rows' other columns: %w", err)
	}
	defer rows.Close()
	var out []EventKey
	for rows.Next() {
		var k EventKey
		if err := rows.Scan(&k.Namespace, &k.EventID); err != nil {
			return nil, fmt.Errorf("erase: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// eraseBatch erases the rows of the CTE hit (their ids) that may be
// erased, unless dryRun, and returns the rows of hit, and the last id of
// the CTE batch when the statement has one (0 when it ran out). The
// statement's $1 is subject, $2 dryRun, and args from $3.
//
// The UPDATE carries the lifecycle's guard of erase on the row itself,
// which PostgreSQL checks again on the row's newest version once it holds
// the row's lock: a row a requeue moved back to claimed after the
// statement's snapshot is left with its payload for its apply. A row is
// reported erased only when the UPDATE's RETURNING names it; the others
// are reported as they are after the statement (reread). In the same
// statement the errors River kept of the erased events' apply jobs lose
// every entry that quotes the subject.
func (s *Store) eraseBatch(ctx context.Context, subject string, dryRun bool, with string, args ...any) ([]EraseMatch, int64, error) {
	last := `0::bigint`
	if strings.Contains(with, "batch AS") {
		last = `(SELECT max(id) FROM batch)`
	}
	rows, err := s.db.QueryContext(ctx, with+`,
		done AS (
			UPDATE webhook_event e SET payload = '`+ErasedPayload+`', headers = NULL, body_identity = NULL, erased_at = now(),
				last_error = CASE WHEN strpos(e.last_error, $1) > 0 THEN '`+Erased+`' ELSE e.last_error END,
				discard_reason = CASE WHEN strpos(e.discard_reason, $1) > 0 THEN '`+Erased+`' ELSE e.discard_reason END,
				failure_log = CASE WHEN jsonb_typeof(e.failure_log) = 'array' THEN (
					SELECT coalesce(jsonb_agg(CASE WHEN strpos(f->>'error', $1) > 0 THEN f || jsonb_build_object('error', '`+Erased+`') ELSE f END ORDER BY n), '[]')
					FROM jsonb_array_elements(e.failure_log) WITH ORDINALITY AS l(f, n)) ELSE e.failure_log END
			FROM hit WHERE e.id = hit.id AND NOT $2 AND `+guardSQL(ActorErase, "e")+`
				-- A job still running on the row (one a discard cancelled
				-- mid-run) writes its error into River after it ends: the
				-- row waits for the next erase, reported pending.
				AND NOT EXISTS (SELECT FROM river_job r WHERE r.state = 'running' AND (`+ownApplyJobOf("e")+` OR `+batchHoldingOf("e")+`))
			RETURNING e.id, e.namespace, e.event_id),
		jobs AS (
			UPDATE river_job j SET errors = (
				SELECT array_agg(CASE WHEN strpos(x->>'error', $1) > 0 OR strpos(x->>'trace', $1) > 0
					THEN x || jsonb_build_object('error', '`+Erased+`', 'trace', '') ELSE x END ORDER BY n)
				FROM unnest(j.errors) WITH ORDINALITY AS u(x, n))
			WHERE j.id IN (
				SELECT a.id FROM river_job a JOIN done d ON a.kind = '`+ApplyArgs{}.Kind()+`'
					AND a.args->>'namespace' = d.namespace AND a.args->>'event_id' = d.event_id
				UNION
				SELECT b.id FROM river_job b JOIN done d ON b.kind = '`+ApplyBatchArgs{}.Kind()+`'
					AND b.args->'events' @> jsonb_build_array(jsonb_build_object('namespace', d.namespace, 'event_id', d.event_id)))
			AND EXISTS (SELECT FROM unnest(j.errors) x WHERE strpos(x->>'error', $1) > 0 OR strpos(x->>'trace', $1) > 0)
			RETURNING j.id)
		SELECT e.id, e.namespace, e.event_id, e.event_type, e.status, e.received_at, e.id IN (SELECT id FROM done), 0::bigint
		FROM webhook_event e JOIN hit USING (id)
		UNION ALL SELECT 0, '', '', '', '', now(), false, coalesce(`+last+`, 0)`, append([]any{subject, dryRun}, args...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("erase: %w", err)
	}
	defer rows.Close()
	var (
		hits  []EraseMatch
		moved []int64
		next  int64
	)
	for rows.Next() {
		var (
			m      EraseMatch
			id, nx int64
			erased bool
		)
		if err := rows.Scan(&id, &m.Namespace, &m.EventID, &m.Type, &m.Status, &m.ReceivedAt, &erased, &nx); err != nil {
			return nil, 0, fmt.Errorf("erase: %w", err)
		}
		if m.EventID == "" {
			next = nx
			continue
		}
		// The statement's snapshot says what the row was; erased is what
		// the UPDATE changed. A row it did not change, though the snapshot
		// allowed it, was moved by another path meanwhile.
		from := stateOf(m.Status, false)
		switch {
		case dryRun:
			m.erased = mayAct(ActorErase, from)
		case erased:
			m.erased = true
		case mayAct(ActorErase, from):
			moved = append(moved, id)
		}
		m.id = id
		hits = append(hits, m)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("erase: %w", err)
	}
	if len(moved) > 0 {
		if err := s.reread(ctx, hits, moved); err != nil {
			return nil, 0, err
		}
	}
	return hits, next, nil
}

// reread sets the status of the hits whose ids are moved to what the row
// says now.
func (s *Store) reread(ctx context.Context, hits []EraseMatch, moved []int64) error {
	rows, err := s.db.QueryContext(ctx, `SELECT id, status, erased_at IS NOT NULL FROM webhook_event WHERE id = ANY($1)`, moved)
	if err != nil {
		return fmt.Errorf("erase: reread the rows another path moved: %w", err)
	}
	defer rows.Close()
	now := map[int64]State{}
	for rows.Next() {
		var (
			id     int64
			status string
			erased bool
		)
		if err := rows.Scan(&id, &status, &erased); err != nil {
			return fmt.Errorf("erase: %w", err)
		}
		now[id] = stateOf(status, erased)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("erase: %w", err)
	}
	for i := range hits {
		if st, ok := now[hits[i].id]; ok {
			// Another erase may have erased it meanwhile: it is erased.
			hits[i].Status, hits[i].erased = string(st), st == StateErased
		}
	}
	return nil
}

// add sorts the rows that hold the subject into erased and pending.
func (r *EraseReport) add(hits []EraseMatch) {
	for _, m := range hits {
		if m.erased {
			r.Rows = append(r.Rows, m)
		} else {
			r.Pending = append(r.Pending, m)
		}
	}
}

// Holds reports whether a plaintext payload holds subject: erase's one
// rule, for plaintext and sealed payloads alike. A JSON body (its first
// character after JSON's whitespace is '{' or '[') holds it as a whole
// string token, a value or a key (duplicates included), written as it is
// or with escapes; a string that only contains it, or another id it is a
// prefix of (cus_1 in cus_12), does not. Any other body is read as a form
// (fields split on '&', key and value on '=', each percent-decoded, so a
// text body is one key): a key or value holds it when it equals the
// subject, holds it as a word (what is next to it on either side, if
// anything, is not a letter, digit, '_' or '-'), or is JSON holding it
// (Slack's payload=...).
func Holds(payload []byte, subject string) bool {
	if subject == "" {
		return false
	}
	if looksJSON(payload) {
		return jsonHolds(payload, subject)
	}
	for field := range strings.SplitSeq(string(payload), "&") {
		k, v, _ := strings.Cut(field, "=")
		for _, part := range [2]string{k, v} {
			if decoded, err := url.QueryUnescape(part); err == nil {
				part = decoded
			}
			if looksJSON([]byte(part)) {
				if jsonHolds([]byte(part), subject) {
					return true
				}
				continue
			}
			if holdsWord(part, subject) {
				return true
			}
		}
	}
	return false
}

// looksJSON reports whether b starts, after JSON's whitespace, with '{'
// or '['.
func looksJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// jsonHolds reports whether a string token of the JSON text b (a value or
// a key) equals subject.
func jsonHolds(b []byte, subject string) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if str, ok := tok.(string); ok && str == subject {
			return true
		}
	}
}

// holdsWord reports whether text holds subject with no letter, digit,
// '_' or '-' right before or after it.
func holdsWord(text, subject string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], subject)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(subject)
		if (start == 0 || !idByte(text[start-1])) && (end == len(text) || !idByte(text[end])) {
			return true
		}
		i = start + 1
	}
}

// idByte reports whether c may be part of an id: a letter, digit, '_' or
// '-'.
func idByte(c byte) bool {
	return c == '_' || c == '-' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// ModuleErasure is what one module's EraseFunc erased, or on a dry run
// would erase.
type ModuleErasure struct {
	Module string `json:"module"`
	Rows   int64  `json:"rows"`
}

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// EraseModules runs every EraseFunc reg holds, in registration order, in
// one transaction: every module's rows of subject go, or none do. With
// dryRun it rolls the transaction back, so it reports what a real run
// would do and changes nothing. It returns one entry per module that
// registered an EraseFunc, in that order; a failure names the module.
//
// hookledger erase runs it after Erase: a business row written by an
// event that was settled when Erase ran is erased here, and an event not
// yet settled is one Erase reported as pending, so the command exits
// non-zero and is run again.
func (s *Store) EraseModules(ctx context.Context, reg *Registry, subject, namespace string, dryRun bool) ([]ModuleErasure, error) {
	if subject == "" {
		return nil, errors.New("erase: an empty subject matches every row")
	}
	var out []ModuleErasure
	err := InTx(ctx, s.db, func(tx *Tx) error {
		out = out[:0]
		for _, e := range reg.erasers {
			n, err := e.fn(ctx, tx, subject, namespace, dryRun)
			if err != nil {
				return fmt.Errorf("erase the rows of module %s: %w", e.module, err)
			}
			if i := slices.IndexFunc(out, func(m ModuleErasure) bool { return m.Module == e.module }); i >= 0 {
				out[i].Rows += n
				continue
			}
			out = append(out, ModuleErasure{Module: e.module, Rows: n})
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
