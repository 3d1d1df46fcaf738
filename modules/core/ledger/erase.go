package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/ent/webhookevent"
)

// ErasedPayload is what an erased row's payload becomes: it keeps its
// namespace, event id, type, times, status and digest, so a redelivery is
// still a duplicate, and nothing of the subject.
const ErasedPayload = `{"hookledger":"erased"}`

// EraseMatch is a ledger row whose payload holds the subject.
type EraseMatch struct {
	EventKey
	Type       string    `json:"event_type"`
	Status     string    `json:"status"`
	ReceivedAt time.Time `json:"received_at"`
}

// EraseReport says what Erase found or did.
type EraseReport struct {
	// Rows are the rows whose payload was (or, dry, would be) erased.
	Rows []EraseMatch `json:"rows"`
	// Pending are rows that hold the subject but are not settled or
	// discarded: erasing them would apply a redaction marker. Settle or
	// discard them, then erase again.
	Pending []EraseMatch `json:"pending"`
}

// eraseBatch is how many rows one erase statement looks at.
const eraseBatch = 1000

// holdsSubjectSQL is true when the payload of row e holds the subject $2
// as a JSON string value anywhere, or, for a payload that is not JSON (a
// form body), as text. The text search first skips the payloads that
// cannot hold it: one with no backslash writes every string as it is, so
// it holds the value only if its text does; one with escapes is parsed.
const holdsSubjectSQL = `(strpos(e.payload, $2) > 0 OR strpos(e.payload, '\') > 0) AND
	CASE WHEN left(ltrim(e.payload), 1) IN ('{', '[')
		THEN jsonb_path_exists(e.payload::jsonb, '$.** ? (@ == $v)', jsonb_build_object('v', $2::text))
		ELSE strpos(e.payload, $2) > 0 END`

// Erase replaces, in every ledger row of namespace (all when empty) whose
// payload holds subject as a JSON string value, the payload by
// ErasedPayload and the headers by none, clears a last error or failure
// log that quotes it, and records erased_at; with dryRun it only lists
// them. Rows still to be applied are listed as Pending and left alone. It
// works in batches of rows, each its own statement, so it can run on a
// live ledger.
func (s *Store) Erase(ctx context.Context, subject, namespace string, dryRun bool) (EraseReport, error) {
	var r EraseReport
	if subject == "" {
		return r, errors.New("erase: an empty subject matches every payload")
	}
	var after int64
	for {
		// The candidates of one batch of ids; the statement updates those
		// that may be erased and returns all of them.
		rows, err := s.db.QueryContext(ctx, `
			WITH batch AS (
				SELECT id FROM webhook_event WHERE id > $1 AND ($3 = '' OR namespace = $3) ORDER BY id LIMIT $4),
			hit AS (
				SELECT e.id, e.namespace, e.event_id, e.event_type, e.status, e.received_at FROM webhook_event e
				JOIN batch USING (id)
				WHERE e.erased_at IS NULL AND `+holdsSubjectSQL+`),
			done AS (
				UPDATE webhook_event e SET payload = '`+ErasedPayload+`', headers = NULL, erased_at = now(),
					last_error = CASE WHEN strpos(e.last_error, $2) > 0 THEN '(erased)' ELSE e.last_error END,
					failure_log = CASE WHEN strpos(e.failure_log::text, $2) > 0 THEN NULL ELSE e.failure_log END
				FROM hit WHERE e.id = hit.id AND NOT $5 AND e.status IN (`+settledSQL+`, `+discardedSQL+`)
				RETURNING e.id)
			SELECT hit.namespace, hit.event_id, hit.event_type, hit.status, hit.received_at, 0 FROM hit
			UNION ALL SELECT '', '', '', '', now(), (SELECT max(id) FROM batch)`,
			after, subject, namespace, eraseBatch, dryRun)
		if err != nil {
			return r, fmt.Errorf("erase: %w", err)
		}
		var last sql.NullInt64
		for rows.Next() {
			var (
				m  EraseMatch
				id sql.NullInt64
			)
			if err := rows.Scan(&m.Namespace, &m.EventID, &m.Type, &m.Status, &m.ReceivedAt, &id); err != nil {
				rows.Close()
				return r, fmt.Errorf("erase: %w", err)
			}
			switch {
			case m.EventID == "":
				last = id
			case m.Status == string(webhookevent.StatusSettled) || m.Status == string(webhookevent.StatusDiscarded):
				r.Rows = append(r.Rows, m)
			default:
				r.Pending = append(r.Pending, m)
			}
		}
		if err := rows.Close(); err != nil {
			return r, fmt.Errorf("erase: %w", err)
		}
		if err := rows.Err(); err != nil {
			return r, fmt.Errorf("erase: %w", err)
		}
		if !last.Valid {
			return r, nil
		}
		after = last.Int64
	}
}
