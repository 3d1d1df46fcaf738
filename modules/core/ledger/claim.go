package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
)

// EventKey is a ledger key.
type EventKey struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
}

// compare orders ledger keys. Transactions that lock ledger rows in this
// order cannot deadlock on them.
func (k EventKey) compare(o EventKey) int {
	return cmp.Or(strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.EventID, o.EventID))
}

// Claim is a verified delivery about to be claimed.
type Claim struct {
	Namespace string
	EventID   string
	Provider  string
	Source    string
	Type      string
	// Payload is the delivered body. The claim reads it from the batch's
	// goroutine and never changes it; a Store with Payloads keeps it for
	// the event's apply. It must not change once claimed.
	Payload    []byte
	OccurredAt time.Time
	Headers    map[string]string
	// SecretIndex is the position of the secret that matched; nil for a
	// replayed delivery, which is not verified.
	SecretIndex *int
	// SecretFingerprint names the secret that matched across rotations
	// (provider.SecretFingerprint); empty for a replayed delivery.
	SecretFingerprint string
	// ClockSkew is receive time minus the signed timestamp; nil when the
	// provider signs none.
	ClockSkew *time.Duration
	Replayed  bool
	// BodyDigest, when set, is a second claim key within the namespace:
	// for providers that sign only the body, the same signed body under
	// another id is a replay, answered as a duplicate.
	BodyDigest string
	// BodyIdentity, when set, is the SHA-256 of the body less the
	// provider's per-attempt fields (provider.BodyIdentity): the row keeps
	// its digest (Sealer.identity) so that a later duplicate is compared
	// with it (StoredBodies) and the stored body is never read for that.
	BodyIdentity []byte
	// storedIdentity is BodyIdentity as the row keeps it (sealRows).
	storedIdentity string
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
// itself, on a connection of the pool it borrows from database/sql. In
// enforce mode the claim is one statement, its apply job inserted by the
// same statement (claimWithJobSQL): one round trip and an implicit
// transaction, where BEGIN, the claim, River's insert and COMMIT took four.
// Under log-only, or with insert middleware (tracing) to run, it inserts
// its jobs through a River client on River's pgx driver (claimJobs) in a
// transaction: River's database/sql driver sends a job's arrays as text
// that pgx parses back, JSON included, which cost three times the CPU of
// the whole insert on pgx. A connection that fails mid-claim is closed by
// pgx, and database/sql then drops it.
func (s *Store) claim(ctx context.Context, rows []Claim) ([]ClaimResult, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimsName(rows), err)
	}
	defer conn.Close()
	stored := s.sealRows(rows)
	var res []ClaimResult
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("claim: the database is not on pgx (%T)", dc)
		}
		if s.jobsInStatement {
			var err error
			res, err = s.claimInStatement(ctx, c.Conn(), stored)
			return err
		}
		return pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error {
			var err error
			res, err = s.claimRows(ctx, tx, stored)
			return err
		})
	})
	if err == nil {
		s.keepPayloads(rows, res)
	}
	return res, err
}

// sealRows are rows as stored: with PAYLOAD_KEYS, their payloads sealed
// (seal.go); else rows themselves.
func (s *Store) sealRows(rows []Claim) []Claim {
	out := make([]Claim, len(rows))
	for i, c := range rows {
		out[i] = c
		out[i].Payload = s.sealer.Seal(c.key(), c.Payload)
		if len(c.BodyIdentity) > 0 {
			out[i].storedIdentity = s.sealer.identity(c.BodyIdentity)
		}
	}
	return out
}

// keepPayloads hands the apply, once the claim has committed, the
// payloads it inserted (Payloads). Under log-only every apply is forced
// and reads the ledger. A key twice in one batch is left out: which of its
// bodies the statement stored is the statement's business.
func (s *Store) keepPayloads(rows []Claim, res []ClaimResult) {
	if s.payloads == nil || s.logOnly {
		return
	}
	seen := make(map[EventKey]int, len(rows))
	for _, c := range rows {
		seen[c.key()]++
	}
	now := time.Now()
	for i, c := range rows {
		if res[i] == Claimed && seen[c.key()] == 1 {
			s.payloads.put(c.key(), c.Payload, now)
		}
	}
}

// claimRows inserts the ledger rows of rows with ClaimStatement, learns
// from its RETURNING which keys this transaction inserted, and enqueues
// the apply jobs with one InsertManyTx: the first row of each inserted key
// is Claimed, every other row a Duplicate. The events claimed together are
// applied together (one apply_batch job). Under log-only each claimed event
// and each duplicate that has a row of its own gets a forced apply_event
// job instead: every delivery is applied, settled or not.
func (s *Store) claimRows(ctx context.Context, tx pgx.Tx, rows []Claim) ([]ClaimResult, error) {
	inserted, err := insertRows(rows, func(args []any) (map[EventKey]bool, error) {
		return insertedKeys(ctx, tx, claimSQL, args)
	})
	if err != nil {
		return nil, err
	}
	res := firstClaims(rows, inserted)
	var (
		jobs    []river.InsertManyParams
		claimed []EventKey
	)
	for i, c := range rows {
		k := c.key()
		if s.logOnly && res[i] == Duplicate {
			state, err := rowState(ctx, tx, c)
			if err != nil {
				return nil, err
			}
			// Applied again only when it was applied (a receiver without a
			// ledger would run it twice); an event still to be applied
			// has its own job, and a discarded, erased or pruned one, or a
			// body-digest replay with no row of its own, has nothing to
			// apply again (the lifecycle table's log-only rows).
			res[i] = LoggedDuplicate
			if state == StateSettled {
				res[i] = DuplicateReapplied
			}
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

// claimInStatement is claimRows in enforce mode as one statement,
// claimWithJobSQL, outside any transaction of its own: the statement is
// its transaction. It wakes the workers as River's insert would, paced
// as River paces it (notice).
func (s *Store) claimInStatement(ctx context.Context, conn *pgx.Conn, rows []Claim) ([]ClaimResult, error) {
	at := noticeClock()
	notify := s.insertNotice.due(at)
	inserted, err := insertRows(rows, func(args []any) (map[EventKey]bool, error) {
		return claimPrepared(ctx, conn, append(args, notify))
	})
	if err != nil {
		return nil, err
	}
	if notify && len(inserted) > 0 {
		s.insertNotice.sent(at)
	}
	return firstClaims(rows, inserted), nil
}

// firstClaims is the claim's answer per row: the first row of each key
// the statement inserted is Claimed, every other row a Duplicate.
func firstClaims(rows []Claim, inserted map[EventKey]bool) []ClaimResult {
	res := make([]ClaimResult, len(rows))
	for i, c := range rows {
		res[i] = Duplicate
		if k := c.key(); inserted[k] {
			delete(inserted, k) // a later row of the same key is a duplicate
			res[i] = Claimed
		}
	}
	return res
}

// claimStatementName is the name claimWithJobSQL is prepared under, once
// per connection.
const claimStatementName = "hookledger_claim_with_job"

// bodiesParam is the index of the bodies among the claim statement's
// arguments ($13).
const bodiesParam = 12

// claimPrepared runs claimWithJobSQL with args on conn and returns the
// keys it inserted. It sends the bodies from claimArgs' buffer as they
// are: Query would first copy them into a buffer of its own, which pgx
// makes anew for every statement, the largest allocation and copy of a
// claim (pgx still copies them once more, into the message it writes).
// So it encodes the other arguments as Query does, with pgx's
// ExtendedQueryBuilder, and runs the statement, prepared on the
// connection, with the bodies in their place. It forgets the prepared
// statement when PostgreSQL no longer runs it (staleStatement). Where
// statements are not cached (a transaction pooler) or are traced, it is
// Query.
func claimPrepared(ctx context.Context, conn *pgx.Conn, args []any) (map[EventKey]bool, error) {
	if cfg := conn.Config(); cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cfg.Tracer != nil {
		return insertedKeys(ctx, conn, claimWithJobSQL, args)
	}
	sd, err := conn.Prepare(ctx, claimStatementName, claimWithJobSQL)
	if err != nil {
		return nil, err
	}
	bodies := args[bodiesParam].([]byte)
	args[bodiesParam] = []byte{}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(conn.TypeMap(), sd, args); err != nil {
		return nil, err
	}
	// A bytea in binary is its bytes.
	eqb.ParamValues[bodiesParam], eqb.ParamFormats[bodiesParam] = bodies, pgx.BinaryFormatCode
	rr := conn.PgConn().ExecStatement(ctx, sd, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
	inserted := map[EventKey]bool{}
	for rr.NextRow() {
		// namespace and event_id: a varchar is its bytes in either format.
		v := rr.Values()
		inserted[EventKey{Namespace: string(v[0]), EventID: string(v[1])}] = true
	}
	if _, err := rr.Close(); err != nil {
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && staleStatement[pgErr.Code] {
			// Else every later claim on conn fails. Within the claim's
			// deadline: where that has passed, the next claim fails the
			// same way and forgets it.
			_ = conn.Deallocate(ctx, claimStatementName)
		}
		return nil, err
	}
	return inserted, nil
}

// staleStatement are the errors of a prepared statement PostgreSQL no
// longer runs: its plan changed the types it returns (a migration), or
// the session forgot it (DISCARD ALL). pgx forgets a statement it caches
// after any error; the claim's other errors (a deadlock, bad data) leave
// its statement as good as it was.
var staleStatement = map[string]bool{
	"0A000": true, // feature not supported: cached plan must not change result type
	"26000": true, // invalid SQL statement name
}

// insertRows runs the claim of rows with run, which it gives the claim
// statement's arguments (claimArgs), and returns the keys it inserted.
func insertRows(rows []Claim, run func(args []any) (map[EventKey]bool, error)) (map[EventKey]bool, error) {
	buf := claimBodies.Get().(*[]byte)
	inserted, err := run(claimArgs(rows, buf))
	// PostgreSQL has the bodies by now. A buffer grown past
	// claimBodiesKept by a batch of large bodies is left to the collector
	// rather than held for the next batch.
	if cap(*buf) <= claimBodiesKept {
		claimBodies.Put(buf)
	}
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", claimsName(rows), err)
	}
	return inserted, nil
}

// querier runs a statement that returns rows: a transaction or a
// connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// claimSQL is the claim: the design card's upsert-do-nothing, one
// statement whatever the number of rows (see the package doc). No conflict
// target: a conflict on either unique key, the event id or the body
// digest, is a duplicate. The payloads go as one bytea of the bodies end
// to end, which each row takes its slice of ($6, $7): pgx encodes an
// array element by element into a buffer that starts small for every
// statement, so a batch of 7 KB bodies as text[] cost four times their
// size in allocations and copies, where one bytea is copied once.
// convert_from checks the bytes as UTF-8, as text input does, and stores
// them unchanged. An event whose row was pruned is a duplicate by its kept
// keys (keys.go).
var claimSQL = `
	INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, headers,
		secret_index, clock_skew_ms, occurred_at, replayed, body_digest, secret_fingerprint, body_identity)
	SELECT k.namespace, k.event_id, k.provider, k.source, k.event_type,
		convert_from(substring($13::bytea FROM k.start FOR k.size), 'UTF8'), k.headers,
		k.secret_index, k.clock_skew_ms, k.occurred_at, k.replayed, k.body_digest, k.secret_fingerprint, k.body_identity
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::int[], $8::jsonb[],
		$9::bigint[], $10::bigint[], $11::timestamptz[], $12::boolean[], $14::text[], $15::text[], $16::text[])
		AS k(namespace, event_id, provider, source, event_type, start, size, headers,
			secret_index, clock_skew_ms, occurred_at, replayed, body_digest, secret_fingerprint, body_identity)
	WHERE NOT ` + keptKeySQL("k") + `
	ON CONFLICT DO NOTHING
	RETURNING namespace, event_id`

// claimWithJobSQL is claimSQL and the apply job of the events it inserted
// (claimJobSQL) in one statement, so one implicit transaction. It returns
// the inserted keys.
var claimWithJobSQL = `
	WITH ins AS (` + claimSQL + `),
	job AS (` + claimJobSQL + `)
	SELECT ins.namespace, ins.event_id FROM ins LEFT JOIN job ON true`

// ClaimStatement is the claim's statement and its arguments for rows,
// which it orders by key, so that concurrent claims lock their keys in the
// same order and cannot deadlock on them. The body digest, a second
// unique key, is not in that order: two concurrent batches that each
// replay the other's body under new ids can deadlock, and PostgreSQL then
// fails one of them, whose requests Batcher claims again one by one. It
// returns the keys it inserted. Store.Claim and Batcher run it (in enforce
// mode within claimWithJobSQL); the benchmark's batched ceiling runs it
// without them.
func ClaimStatement(rows []Claim) (string, []any) {
	return claimSQL, claimArgs(rows, new([]byte))
}

// claimArgs are the claim statement's arguments for rows, with the bodies
// in *buf, which it grows as it needs and leaves there; the arguments hold
// it until the statement has run.
func claimArgs(rows []Claim, buf *[]byte) []any {
	// Sorted by pointer: a Claim is too large to move about.
	sorted := make([]*Claim, len(rows))
	for i := range rows {
		sorted[i] = &rows[i]
	}
	slices.SortStableFunc(sorted, func(a, b *Claim) int { return a.key().compare(b.key()) })
	n, size := len(rows), 0
	for _, c := range sorted {
		size += len(c.Payload)
	}
	var (
		namespaces, eventIDs, providers, sources = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		types, headers                           = make([]string, n), make([]string, n)
		starts, sizes                            = make([]int32, n), make([]int32, n)
		bodies                                   = slices.Grow((*buf)[:0], size)
		secretIdx, skews                         = make([]*int64, n), make([]*int64, n)
		occurred                                 = make([]*time.Time, n)
		replayed                                 = make([]bool, n)
		digests, fingerprints, identities        = make([]*string, n), make([]*string, n), make([]*string, n)
	)
	if bodies == nil {
		// pgx sends a nil slice as NULL: a batch of empty bodies stores
		// empty payloads.
		bodies = []byte{}
	}
	for i, c := range sorted {
		namespaces[i], eventIDs[i], providers[i], sources[i], types[i] = c.Namespace, c.EventID, c.Provider, c.Source, c.Type
		// substring counts from 1.
		starts[i], sizes[i] = int32(len(bodies)+1), int32(len(c.Payload))
		bodies = append(bodies, c.Payload...)
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
		if c.SecretFingerprint != "" {
			fingerprints[i] = &c.SecretFingerprint
		}
		if c.storedIdentity != "" {
			identities[i] = &c.storedIdentity
		}
	}
	*buf = bodies
	return []any{namespaces, eventIDs, providers, sources, types, starts, sizes, headers, secretIdx, skews, occurred, replayed, bodies, digests, fingerprints, identities}
}

// claimBodies holds the buffers the claim statement's bodies go in, one
// batch's worth each (claimArgs).
var claimBodies = sync.Pool{New: func() any { return new([]byte) }}

// claimBodiesKept is the largest buffer claimBodies keeps.
const claimBodiesKept = 4 << 20

// insertedKeys runs the claim statement and collects its RETURNING.
func insertedKeys(ctx context.Context, q querier, query string, args []any) (map[EventKey]bool, error) {
	rs, err := q.Query(ctx, query, args...)
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

// rowState is the lifecycle state of the row of in's key: StatePruned
// when it has none (its keys outlived it, or only its body is known).
func rowState(ctx context.Context, tx pgx.Tx, in Claim) (State, error) {
	var (
		status string
		erased bool
	)
	err := tx.QueryRow(ctx, `SELECT status, erased_at IS NOT NULL FROM webhook_event WHERE namespace = $1 AND event_id = $2`,
		in.Namespace, in.EventID).Scan(&status, &erased)
	if errors.Is(err, pgx.ErrNoRows) {
		return StatePruned, nil
	}
	if err != nil {
		return "", fmt.Errorf("look up %s/%s: %w", in.Namespace, in.EventID, err)
	}
	return stateOf(status, erased), nil
}
