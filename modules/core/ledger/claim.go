package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
)

// Claim is a verified delivery about to be claimed.
type Claim struct {
	Namespace string
	EventID   string
	Provider  string
	Source    string
	Type      string
	// Payload is the delivered body. The claim reads it until Claim
	// returns, from the batch's goroutine, and never changes it: it must
	// not change before then.
	Payload    []byte
	OccurredAt time.Time
	Headers    map[string]string
	// SecretIndex is the position of the secret that matched; nil for a
	// replayed delivery, which is not verified.
	SecretIndex *int
	// ClockSkew is receive time minus the signed timestamp; nil when the
	// provider signs none.
	ClockSkew *time.Duration
	Replayed  bool
	// BodyDigest, when set, is a second claim key within the namespace:
	// for providers that sign only the body, the same signed body under
	// another id is a replay, answered as a duplicate.
	BodyDigest string
}

// ErrIncomplete refuses a claim without its namespace, event id, provider
// or source: the parse refuses such a delivery first, so only a caller
// that builds claims itself can meet it.
var ErrIncomplete = errors.New("claim without its namespace, event id, provider or source")

// check refuses, before any database access, what the claim statement
// must not see: missing keys, and a payload that jsonb would refuse
// (ErrUnstorable).
func (c Claim) check() error {
	if c.Namespace == "" || c.EventID == "" || c.Provider == "" || c.Source == "" {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.EventID, ErrIncomplete)
	}
	if err := CheckPayload(c.Payload); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.EventID, err)
	}
	return nil
}

func (c Claim) key() EventKey { return EventKey{Namespace: c.Namespace, EventID: c.EventID} }

// ClaimResult is what a claim did with a delivery. The claim mode is the
// Store's, so the result already says whether a duplicate is applied again.
type ClaimResult uint8

const (
	// Claimed: the delivery inserted the event's row, and the job that
	// applies it committed with it.
	Claimed ClaimResult = iota + 1
	// Duplicate: the ledger already held the event, or its body under
	// another id (BodyDigest), or an earlier delivery in the same
	// transaction claimed it; nothing was written.
	Duplicate
	// DuplicateReapplied is a duplicate under CLAIM_MODE=log-only: a job
	// applies the event's row again, as a receiver without a ledger would.
	DuplicateReapplied
	// LoggedDuplicate is a duplicate under CLAIM_MODE=log-only that has no
	// row of its own to apply again (its body is another id's: BodyDigest).
	// Like every log-only duplicate it is one enforce mode would skip.
	LoggedDuplicate
)

// WouldSkip reports whether r is a duplicate that CLAIM_MODE=log-only let
// through, which enforce mode would have skipped.
func (r ClaimResult) WouldSkip() bool { return r == DuplicateReapplied || r == LoggedDuplicate }

func (r ClaimResult) String() string {
	switch r {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case DuplicateReapplied:
		return "duplicate_reapplied"
	case LoggedDuplicate:
		return "logged_duplicate"
	}
	return "ClaimResult(" + strconv.Itoa(int(r)) + ")"
}

// Claim claims one delivery: the row and its apply job in one transaction,
// so a committed claim is always applied. It is the batch of one of the
// claim Batcher runs for many (claimRows). A payload that jsonb would
// refuse is refused first (ErrUnstorable), with no database access.
func (s *Store) Claim(ctx context.Context, in Claim) (ClaimResult, error) {
	if err := in.check(); err != nil {
		return 0, err
	}
	res, err := s.claim(ctx, []Claim{in})
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// claim claims rows in one transaction of their own. It runs on pgx
// itself, on a connection of the pool it borrows from database/sql, and
// inserts its jobs through a River client on River's pgx driver
// (claimJobs): River's database/sql driver sends a job's arrays as text
// that pgx parses back, JSON included, which cost three times the CPU of
// the whole insert on pgx, and the claim is the hot path. A connection
// that fails mid-claim is closed by pgx, and database/sql then drops it.
func (s *Store) claim(ctx context.Context, rows []Claim) ([]ClaimResult, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimsName(rows), err)
	}
	defer conn.Close()
	var res []ClaimResult
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("claim: the database is not on pgx (%T)", dc)
		}
		return pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error {
			var err error
			res, err = s.claimRows(ctx, tx, rows)
			return err
		})
	})
	return res, err
}

// claimRows inserts the ledger rows of rows with ClaimStatement, learns
// from its RETURNING which keys this transaction inserted, and enqueues
// the apply jobs with one InsertManyTx: the first row of each inserted key
// is Claimed, every other row a Duplicate. The events claimed together are
// applied together (one apply_batch job). Under log-only each claimed event
// and each duplicate that has a row of its own gets a forced apply_event
// job instead: every delivery is applied, settled or not.
func (s *Store) claimRows(ctx context.Context, tx pgx.Tx, rows []Claim) ([]ClaimResult, error) {
	query, args := ClaimStatement(rows)
	inserted, err := insertedKeys(ctx, tx, query, args)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimsName(rows), err)
	}
	res := make([]ClaimResult, len(rows))
	var (
		jobs    []river.InsertManyParams
		claimed []EventKey
	)
	for i, c := range rows {
		k := c.key()
		switch {
		case inserted[k]:
			delete(inserted, k) // a later row of the same key is a duplicate
			res[i] = Claimed
		case s.logOnly:
			own, err := hasRow(ctx, tx, c)
			if err != nil {
				return nil, err
			}
			res[i] = LoggedDuplicate // a body-digest replay: no row of its own to apply again
			if own {
				res[i] = DuplicateReapplied
			}
		default:
			res[i] = Duplicate
		}
		switch {
		case res[i] == Duplicate, res[i] == LoggedDuplicate:
		case s.logOnly:
			jobs = append(jobs, river.InsertManyParams{Args: ApplyArgs{Namespace: k.Namespace, EventID: k.EventID, Force: true}})
		default:
			claimed = append(claimed, k)
		}
	}
	switch {
	case len(claimed) == 1:
		jobs = append(jobs, river.InsertManyParams{Args: ApplyArgs{Namespace: claimed[0].Namespace, EventID: claimed[0].EventID, Fresh: true}})
	case len(claimed) > 1:
		jobs = append(jobs, river.InsertManyParams{Args: ApplyBatchArgs{Events: claimed}})
	}
	if len(jobs) > 0 {
		if _, err := s.claimJobs.InsertManyTx(ctx, tx, jobs); err != nil {
			return nil, fmt.Errorf("enqueue apply of %s: %w", claimsName(rows), err)
		}
	}
	return res, nil
}

// claimSQL is the claim: the design card's upsert-do-nothing, one
// statement whatever the number of rows (see the package doc). No conflict
// target: a conflict on either unique key, the event id or the body
// digest, is a duplicate. The payload goes as text whatever pgx's query
// mode (bytes would go as bytea).
const claimSQL = `
	INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, headers,
		secret_index, clock_skew_ms, occurred_at, replayed, body_digest)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
		$8::bigint[], $9::bigint[], $10::timestamptz[], $11::boolean[], $12::text[])
	ON CONFLICT DO NOTHING
	RETURNING namespace, event_id`

// ClaimStatement is the claim's statement and its arguments for rows,
// which it orders by key, so that concurrent claims lock in the same order
// and cannot deadlock. It returns the keys it inserted. Store.Claim and
// Batcher run it; the benchmark's batched ceiling runs it without them.
func ClaimStatement(rows []Claim) (string, []any) {
	rows = slices.Clone(rows)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].key().less(rows[j].key()) })
	n := len(rows)
	var (
		namespaces, eventIDs, providers, sources = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		types, payloads, headers                 = make([]string, n), make([]string, n), make([]string, n)
		secretIdx, skews                         = make([]*int64, n), make([]*int64, n)
		occurred                                 = make([]*time.Time, n)
		replayed                                 = make([]bool, n)
		digests                                  = make([]*string, n)
	)
	for i, c := range rows {
		namespaces[i], eventIDs[i], providers[i], sources[i], types[i] = c.Namespace, c.EventID, c.Provider, c.Source, c.Type
		// The body as a string without a copy: pgx copies it into the
		// statement, and nothing changes it while the claim runs (Payload).
		payloads[i] = unsafe.String(unsafe.SliceData(c.Payload), len(c.Payload))
		h, _ := json.Marshal(c.Headers) // a map of strings always marshals
		headers[i] = string(h)
		if c.SecretIndex != nil {
			v := int64(*c.SecretIndex)
			secretIdx[i] = &v
		}
		if c.ClockSkew != nil {
			v := c.ClockSkew.Milliseconds()
			skews[i] = &v
		}
		if !c.OccurredAt.IsZero() {
			occurred[i] = &c.OccurredAt
		}
		replayed[i] = c.Replayed
		if c.BodyDigest != "" {
			digests[i] = &c.BodyDigest
		}
	}
	return claimSQL, []any{namespaces, eventIDs, providers, sources, types, payloads, headers, secretIdx, skews, occurred, replayed, digests}
}

// insertedKeys runs the claim statement and collects its RETURNING.
func insertedKeys(ctx context.Context, tx pgx.Tx, query string, args []any) (map[EventKey]bool, error) {
	rs, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	inserted := map[EventKey]bool{}
	for rs.Next() {
		var k EventKey
		if err := rs.Scan(&k.Namespace, &k.EventID); err != nil {
			return nil, err
		}
		inserted[k] = true
	}
	return inserted, rs.Err()
}

// claimsName names rows in errors: the event of a claim alone, else the
// size of the batch.
func claimsName(rows []Claim) string {
	if len(rows) == 1 {
		return rows[0].Namespace + "/" + rows[0].EventID
	}
	return strconv.Itoa(len(rows)) + " events"
}

// hasRow reports whether the ledger holds in's own key (a duplicate on the
// body digest alone has none).
func hasRow(ctx context.Context, tx pgx.Tx, in Claim) (bool, error) {
	if in.BodyDigest == "" {
		return true, nil
	}
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_event WHERE namespace = $1 AND event_id = $2)`,
		in.Namespace, in.EventID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up %s/%s: %w", in.Namespace, in.EventID, err)
	}
	return ok, nil
}
