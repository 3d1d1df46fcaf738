package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// A kept key outlives its ledger row: when prune removes a settled row, its
// dedup keys (the namespace and event id, and the body digest where the
// source uses one) stay in webhook_key, hashed, with the day the event was
// received and nothing else. The claim consults them in its statement as
// it consults the ledger, so a redelivery of a pruned event is a
// duplicate. KEY_RETENTION expires them, counted from that day.

// Kinds of kept keys, as the hex of the byte that names them in the hash.
const (
	keyOfID     = "69" // 'i': an event id
	keyOfDigest = "64" // 'd': a body digest
)

// keyHashSQL is the SQL expression of a kept key's hash: the first 16
// bytes of SHA-256 over the namespace, the kind of key and its value, the
// first two each ended by a zero byte, which text cannot hold. NULL where
// the value is.
func keyHashSQL(namespace, kind, value string) string {
	return `substring(sha256(convert_to(` + namespace + `, 'UTF8') || '\x00` + kind + `00'::bytea || convert_to(` +
		value + `, 'UTF8')) FROM 1 FOR 16)`
}

// keptKeySQL is true when the event k (with namespace, event_id and
// body_digest) has a kept key: its row was pruned.
func keptKeySQL(k string) string {
	return `EXISTS (SELECT FROM webhook_key x WHERE x.key_hash IN (` +
		keyHashSQL(k+".namespace", keyOfID, k+".event_id") + `, ` + keyHashSQL(k+".namespace", keyOfDigest, k+".body_digest") + `))`
}

// keepKeysSQL copies the keys of up to $3 settled rows received before $1,
// after the (received_at, id) $2/$4, into webhook_key, and returns how
// many rows it read, how many keys it added, and the last row's
// (received_at, id) to go on from.
var keepKeysSQL = `
	WITH batch AS (
		SELECT id, namespace, event_id, body_digest, received_at FROM webhook_event
		WHERE status = ` + settledSQL + ` AND received_at < $1 AND (received_at, id) > ($2, $4)
		ORDER BY received_at, id
		LIMIT $3),
	kept AS (
		INSERT INTO webhook_key (key_hash, received_on)
		SELECT h, (b.received_at AT TIME ZONE 'UTC')::date FROM batch b,
			LATERAL (VALUES (` + keyHashSQL("b.namespace", keyOfID, "b.event_id") + `),
				(` + keyHashSQL("b.namespace", keyOfDigest, "b.body_digest") + `)) AS v(h)
		WHERE h IS NOT NULL
		ON CONFLICT (key_hash) DO NOTHING
		RETURNING 1)
	SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM kept),
		(SELECT received_at FROM batch ORDER BY received_at DESC, id DESC LIMIT 1),
		(SELECT id FROM batch ORDER BY received_at DESC, id DESC LIMIT 1)`

// keepKeys copies the dedup keys of every settled row received before
// cutoff into webhook_key, in paced batches, and returns how many it added.
func keepKeys(ctx context.Context, db *sql.DB, cutoff time.Time) (int64, error) {
	var (
		added   int64
		afterAt = time.Time{}
		afterID int64
		pace    = newPacer()
	)
	for {
		var (
			read, n int64
			lastAt  sql.NullTime
			lastID  sql.NullInt64
		)
		err := db.QueryRowContext(ctx, keepKeysSQL, cutoff, afterAt, PruneBatch, afterID).Scan(&read, &n, &lastAt, &lastID)
		if err != nil {
			return added, fmt.Errorf("keep the keys of prunable rows: %w", err)
		}
		added += n
		if read < PruneBatch {
			return added, nil
		}
		afterAt, afterID = lastAt.Time, lastID.Int64
		if err := pace.next(ctx); err != nil {
			return added, fmt.Errorf("keep the keys of prunable rows: %w", err)
		}
	}
}

// snapshotWait bounds how long prune waits for the statements that began
// before the keys were kept; a run that waited longer deletes nothing and
// the next run tries again.
const snapshotWait = 2 * time.Minute

// waitOlderSnapshots waits until no statement or transaction of this
// database began before now: a claim whose snapshot predates the kept
// keys could miss both them and, once deleted, the rows. It reads
// pg_stat_activity, whose backend_xmin PostgreSQL shows for the sessions
// of the same role (or to pg_read_all_stats): hookledger's processes
// share one. Only client sessions count: a long autovacuum holds an xmin
// but claims nothing.
func waitOlderSnapshots(ctx context.Context, db *sql.DB) error {
	// A transaction id of now: every snapshot taken before it has an
	// xmin older than it.
	var marker string
	if err := db.QueryRowContext(ctx, `SELECT (pg_current_xact_id()::text::bigint % 4294967296)::text`).Scan(&marker); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var (
			older int
			pid   sql.NullInt64
			since sql.NullTime
		)
		err := db.QueryRowContext(ctx, `
			SELECT count(*), min(pid), min(xact_start) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'
				AND backend_xmin IS NOT NULL AND age(backend_xmin) > age($1::xid)`, marker).Scan(&older, &pid, &since)
		if err == nil && older == 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%d transaction(s) older than the kept keys still run (pid %d, since %s)", older, pid.Int64, since.Time.UTC().Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prune waited %s, rows kept for the next run: %w", snapshotWait, err)
		case <-tick.C:
		}
	}
}

// expireKeys deletes the kept keys of events received more than
// keyRetention ago, in batches; zero keeps them for ever.
func expireKeys(ctx context.Context, db *sql.DB, keyRetention time.Duration) (int64, error) {
	if keyRetention <= 0 {
		return 0, nil
	}
	cutoff := time.Now().Add(-keyRetention).UTC()
	var n int64
	pace := newPacer()
	for {
		res, err := db.ExecContext(ctx, `
			DELETE FROM webhook_key WHERE key_hash IN (
				SELECT key_hash FROM webhook_key WHERE received_on < $1::date LIMIT $2)`, cutoff, PruneBatch)
		if err != nil {
			return n, fmt.Errorf("expire kept keys: %w", err)
		}
		k, _ := res.RowsAffected()
		n += k
		if k < PruneBatch {
			return n, nil
		}
		if err := pace.next(ctx); err != nil {
			return n, fmt.Errorf("expire kept keys: %w", err)
		}
	}
}
