package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/predicate"
	"github.com/hookledger/hookledger/ent/webhookevent"
)

// Filter selects ledger rows. Type may end in ".*" for a family.
type Filter struct {
	Namespace string
	// EventID selects the rows of one event id, in every namespace.
	EventID string
	Status  webhookevent.Status
	Source  string
	Type    string
	Since   time.Time
	Until   time.Time
	// After is a keyset cursor, the id of the last row of the previous
	// page (List's next): rows after it in the list's order.
	After int64
	Limit int
}

// ListScanLimit bounds the rows a list page reads when a filter has no
// index of its own (source, type, namespace, settled, processing): the
// page holds the matches among at most this many rows of the time window
// (newest first), and its cursor goes on from there. A rare filter makes
// short pages, even empty ones, each as fast as a full one, rather than
// one page that scans the whole ledger.
const ListScanLimit = 10_000

// indexedStatus reports whether a status has a partial index of its own,
// which holds its rows in received_at order: claimed and failed
// (webhookevent_pending), discarded (webhookevent_discarded).
func indexedStatus(s webhookevent.Status) bool {
	return s == webhookevent.StatusClaimed || s == webhookevent.StatusFailed || s == webhookevent.StatusDiscarded
}

// statusIs matches one status as a literal, not a parameter: a prepared
// statement's generic plan cannot prove a partial index's predicate from a
// parameter, and would scan the ledger for a rare status instead. Only a
// valid status is written into the statement.
func statusIs(s webhookevent.Status) predicate.WebhookEvent {
	if !ValidStatus(s) {
		return webhookevent.StatusEQ(s)
	}
	return predicate.WebhookEvent(func(sel *entsql.Selector) {
		sel.Where(entsql.ExprP(sel.C(webhookevent.FieldStatus) + " = '" + string(s) + "'"))
	})
}

// namespacesSQL is every namespace in the ledger, read from the unique
// index on (namespace, event_id) one namespace at a time (a loose index
// scan): a few index probes however large the ledger, where an event id
// alone would scan the whole index.
const namespacesSQL = `ARRAY(WITH RECURSIVE ns(n) AS (
		SELECT min(namespace) FROM webhook_event
		UNION ALL
		SELECT (SELECT min(namespace) FROM webhook_event WHERE namespace > ns.n) FROM ns WHERE ns.n IS NOT NULL)
	SELECT n FROM ns WHERE n IS NOT NULL)`

// inNamespace matches namespace, or, when it is "", any namespace in a way
// that lets an event id find its rows through the unique index.
func inNamespace(namespace string) predicate.WebhookEvent {
	if namespace != "" {
		return webhookevent.Namespace(namespace)
	}
	return predicate.WebhookEvent(func(sel *entsql.Selector) {
		sel.Where(entsql.ExprP(sel.C(webhookevent.FieldNamespace) + " = ANY (" + namespacesSQL + ")"))
	})
}

// listFields are the columns a list shows: every one but the payload and
// the headers, which only an event's own page reads.
var listFields = slices.DeleteFunc(slices.Clone(webhookevent.Columns), func(c string) bool {
	return c == webhookevent.FieldPayload || c == webhookevent.FieldHeaders
})

// listConditions splits f into what selects rows in received_at order
// through an index (the time window, the cursor, an indexed status, an
// event id) and what is matched among those rows (source, type,
// namespace, another status). The cursor row's received_at is read by its
// id; a row gone since (pruned, with every older one) leaves the id alone
// as the cursor. loose is scan with the cursor's tie-break on id left
// out: what the index alone can answer.
func (s *Store) listConditions(ctx context.Context, f Filter) (scan, loose, rest []predicate.WebhookEvent, err error) {
	if f.EventID != "" {
		scan = append(scan, inNamespace(f.Namespace), webhookevent.EventID(f.EventID))
	} else if f.Namespace != "" {
		rest = append(rest, webhookevent.Namespace(f.Namespace))
	}
	switch {
	case f.Status == "":
	case indexedStatus(f.Status):
		scan = append(scan, statusIs(f.Status))
	default:
		rest = append(rest, statusIs(f.Status))
	}
	if f.Source != "" {
		rest = append(rest, webhookevent.Source(f.Source))
	}
	if prefix, ok := strings.CutSuffix(f.Type, "*"); ok {
		rest = append(rest, webhookevent.EventTypeHasPrefix(prefix))
	} else if f.Type != "" {
		rest = append(rest, webhookevent.EventType(f.Type))
	}
	if !f.Since.IsZero() {
		scan = append(scan, webhookevent.ReceivedAtGTE(f.Since))
	}
	if !f.Until.IsZero() {
		scan = append(scan, webhookevent.ReceivedAtLT(f.Until))
	}
	loose = slices.Clone(scan)
	if f.After > 0 {
		var at time.Time
		err := s.db.QueryRowContext(ctx, `SELECT received_at FROM webhook_event WHERE id = $1`, f.After).Scan(&at)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			scan = append(scan, webhookevent.IDLT(f.After))
			loose = append(loose, webhookevent.IDLT(f.After))
		case err != nil:
			return nil, nil, nil, fmt.Errorf("list cursor %d: %w", f.After, err)
		default:
			scan = append(scan, webhookevent.ReceivedAtLTE(at),
				webhookevent.Or(webhookevent.ReceivedAtLT(at), webhookevent.IDLT(f.After)))
			loose = append(loose, webhookevent.ReceivedAtLTE(at))
		}
	}
	if f.EventID != "" {
		// At most one row per namespace: nothing to bound.
		scan, rest = append(scan, rest...), nil
	}
	return scan, loose, rest, nil
}

// ValidStatus reports whether s is a ledger status.
func ValidStatus(s webhookevent.Status) bool {
	return webhookevent.StatusValidator(s) == nil
}

// List returns matching rows newest first (by received_at, then id),
// without their payload and headers, and the cursor of the next page (0 on
// the last page). A filter without an index of its own is matched among
// at most ListScanLimit rows per page, so a page may hold fewer rows than
// asked, none even, and still have a next one.
func (s *Store) List(ctx context.Context, f Filter) ([]*ent.WebhookEvent, int64, error) {
	limit := min(max(f.Limit, 1), 500)
	scan, loose, rest, err := s.listConditions(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	// floor is the received_at of the ListScanLimit-th row the index
	// conditions select, read from the index alone: the oldest this page
	// looks at. None when fewer rows are left.
	var floor []struct {
		At time.Time `sql:"received_at"`
	}
	if len(rest) > 0 {
		err := s.ent.WebhookEvent.Query().Where(loose...).
			Order(webhookevent.ByReceivedAt(entsql.OrderDesc())).
			Offset(ListScanLimit-1).Limit(1).
			Select(webhookevent.FieldReceivedAt).Scan(ctx, &floor)
		if err != nil {
			return nil, 0, fmt.Errorf("list events: bound the scan: %w", err)
		}
	}
	q := s.ent.WebhookEvent.Query().Where(scan...).Where(rest...)
	if len(floor) > 0 {
		q.Where(webhookevent.ReceivedAtGTE(floor[0].At))
	}
	rows, err := q.Order(webhookevent.ByReceivedAt(entsql.OrderDesc()), webhookevent.ByID(entsql.OrderDesc())).
		Limit(limit + 1).
		Select(listFields...).
		All(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list events: %w", err)
	}
	var next int64
	switch {
	case len(rows) > limit:
		rows = rows[:limit]
		next = rows[limit-1].ID
	case len(floor) > 0:
		// The page read every row from the floor on: the next one starts
		// before the first row received at the floor.
		err := s.db.QueryRowContext(ctx, `SELECT COALESCE(min(id), 0) FROM webhook_event WHERE received_at = $1`, floor[0].At).Scan(&next)
		if err != nil {
			return nil, 0, fmt.Errorf("list events: the cursor at the scan's end: %w", err)
		}
	}
	return rows, next, nil
}

// searchSQL is the ids of up to $2 rows whose event id starts with $1:
// each namespace's rows from $1 on, at most $2 of them, read in the
// unique index's order, so that a prefix matching nothing reads as little
// as one matching millions.
const searchSQL = `
	SELECT w.id FROM unnest(` + namespacesSQL + `) AS ns(n)
	CROSS JOIN LATERAL (SELECT id, event_id FROM webhook_event
		WHERE namespace = ns.n AND event_id >= $1 ORDER BY event_id LIMIT $2) AS w
	WHERE starts_with(w.event_id, $1)
	ORDER BY ns.n, w.event_id LIMIT $2`

// Search returns up to limit rows whose event id starts with prefix, in
// every namespace, by namespace and event id, without their payload and
// headers. It reads at most limit index entries per namespace. Ids are
// found in the database collation's order, which is the bytes' order in
// a C or C.UTF-8 database; under a collation that sorts a matching id
// apart from the prefix, that id is missed, never a wrong one shown.
func (s *Store) Search(ctx context.Context, prefix string, limit int) ([]*ent.WebhookEvent, error) {
	limit = min(max(limit, 1), 500)
	rows, err := s.db.QueryContext(ctx, searchSQL, prefix, limit)
	if err != nil {
		return nil, fmt.Errorf("search ids %q: %w", prefix, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search ids %q: %w", prefix, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	found, err := s.ent.WebhookEvent.Query().Where(webhookevent.IDIn(ids...)).
		Order(webhookevent.ByNamespace(), webhookevent.ByEventID()).
		Select(listFields...).All(ctx)
	if err != nil {
		return nil, fmt.Errorf("search ids %q: %w", prefix, err)
	}
	return found, nil
}

// ErrAmbiguous is returned when an event id exists in several namespaces.
var ErrAmbiguous = errors.New("event id exists in several namespaces")

// ErrNotFound is returned for an unknown event.
var ErrNotFound = errors.New("event not found")

// Find returns the row of eventID, in namespace when given (else in any
// namespace, through the unique index all the same).
func (s *Store) Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error) {
	rows, err := s.ent.WebhookEvent.Query().
		Where(inNamespace(namespace), webhookevent.EventID(eventID)).
		Limit(10).All(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("find %s: %w", eventID, err)
	case len(rows) == 0:
		return nil, ErrNotFound
	case len(rows) > 1:
		return nil, fmt.Errorf("%w: pass a namespace (%s)", ErrAmbiguous, namespaces(rows))
	}
	// The payload as delivered: a sealed one opened (PAYLOAD_KEYS).
	r := rows[0]
	p, err := s.sealer.Open(EventKey{Namespace: r.Namespace, EventID: r.EventID}, []byte(r.Payload))
	if err != nil {
		return nil, err
	}
	r.Payload = string(p)
	return r, nil
}

func namespaces(rows []*ent.WebhookEvent) string {
	ns := make([]string, len(rows))
	for i, r := range rows {
		ns[i] = r.Namespace
	}
	return strings.Join(ns, ", ")
}

// Job is the newest apply job of an event, as River keeps it.
type Job struct {
	ID          int64  `json:"id"`
	Kind        string `json:"kind"`
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// ScheduledAt is when River runs it next, for a job that waits
	// (available, scheduled, retryable); nil otherwise.
	ScheduledAt *time.Time `json:"scheduled_at"`
	Errors      []string   `json:"errors"`
}

// FindJob returns the newest apply job of an event, its own or the batch
// it was claimed in, or nil when River no longer has one (it prunes
// finished jobs). Its errors are River's, each "attempt N at TIME: text".
func (s *Store) FindJob(ctx context.Context, namespace, eventID string) (*Job, error) {
	k := EventKey{Namespace: namespace, EventID: eventID}
	jobs, err := s.FindJobs(ctx, []EventKey{k})
	return jobs[k], err
}

// FindJobs is FindJob for each of keys, in one statement: a page of rows
// costs one plan and one round trip, not one per row. An event River has
// no job for has none in the map.
func (s *Store) FindJobs(ctx context.Context, keys []EventKey) (map[EventKey]*Job, error) {
	jobs := map[EventKey]*Job{}
	if len(keys) == 0 {
		return jobs, nil
	}
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := s.db.QueryContext(ctx, findJobsSQL, namespaces, ids)
	if err != nil {
		return nil, fmt.Errorf("find the apply jobs of %d event(s): %w", len(keys), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k         EventKey
			j         Job
			scheduled sql.NullTime
			errs      []byte
		)
		if err := rows.Scan(&k.Namespace, &k.EventID, &j.ID, &j.Kind, &j.State, &j.Attempt, &j.MaxAttempts, &scheduled, &errs); err != nil {
			return nil, fmt.Errorf("find apply jobs: %w", err)
		}
		if scheduled.Valid {
			at := scheduled.Time.UTC()
			j.ScheduledAt = &at
		}
		var attempts []rivertype.AttemptError
		if err := json.Unmarshal(errs, &attempts); err != nil {
			return nil, fmt.Errorf("read the errors of job %d: %w", j.ID, err)
		}
		j.Errors = make([]string, len(attempts))
		for i, a := range attempts {
			j.Errors[i] = fmt.Sprintf("attempt %d at %s: %s", a.Attempt, a.At.UTC().Format(time.RFC3339), a.Error)
		}
		jobs[k] = &j
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find the apply jobs of %d event(s): %w", len(keys), err)
	}
	return jobs, nil
}
