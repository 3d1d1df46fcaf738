package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
)

// An erased subject is recorded in erased_subject by its SHA-256 digest,
// never its value, with the namespace it was erased in (empty: every
// namespace). A plain digest, not a keyed one: every process that must
// check a value (the workers' module writes, the subscription re-fetch,
// drift, replay) can compute it with no secret, and no key rotation or
// unset PAYLOAD_KEYS can make an erased subject unknown again. The
// table does not give a value back; someone who can read it and already
// guesses a value can tell that it was erased, as webhook_key's hashes
// tell that an event id was seen.

// SubjectDigest is the digest erased_subject keeps of subject: SHA-256 of
// its UTF-8 bytes.
func SubjectDigest(subject string) []byte {
	sum := sha256.Sum256([]byte(subject))
	return sum[:]
}

// ErasedSQL is the SQL condition that value (an SQL expression of text) is
// a subject erased in namespace (an SQL expression) or in every
// namespace. A module's write that takes a subject from an event or the
// provider writes Erased instead where it holds (see RedactErasedSQL).
func ErasedSQL(namespace, value string) string {
	return `EXISTS (SELECT FROM erased_subject x WHERE x.namespace IN (` + namespace + `, '') AND x.digest = sha256(convert_to(` + value + `, 'UTF8')))`
}

// RedactErasedSQL is value (an SQL expression of text), or Erased when it
// is a subject erased in namespace: what a module writes in a column that
// holds a subject.
func RedactErasedSQL(namespace, value string) string {
	return `CASE WHEN ` + ErasedSQL(namespace, value) + ` THEN '` + Erased + `' ELSE ` + value + ` END`
}

// recordErased records subject as erased in namespace, or when it was
// erased there again.
func (s *Store) recordErased(ctx context.Context, subject, namespace string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO erased_subject (namespace, digest) VALUES ($1, $2)
		ON CONFLICT (namespace, digest) DO UPDATE SET erased_at = now()`, namespace, SubjectDigest(subject))
	if err != nil {
		return fmt.Errorf("erase: record the subject: %w", err)
	}
	return nil
}

// Queryer runs a query: *sql.DB, *sql.Tx, *Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ErasedValues returns those of values that are subjects erased in
// namespace or in every namespace.
func ErasedValues(ctx context.Context, q Queryer, namespace string, values []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(values) == 0 {
		return out, nil
	}
	byDigest := make(map[string]string, len(values))
	digests := make([][]byte, 0, len(values))
	for _, v := range values {
		d := SubjectDigest(v)
		if _, ok := byDigest[string(d)]; !ok {
			byDigest[string(d)] = v
			digests = append(digests, d)
		}
	}
	rows, err := q.QueryContext(ctx, `SELECT DISTINCT digest FROM erased_subject WHERE namespace IN ($1, '') AND digest = ANY($2)`, namespace, digests)
	if err != nil {
		return nil, fmt.Errorf("read erased subjects: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d []byte
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("read erased subjects: %w", err)
		}
		out[byDigest[string(d)]] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read erased subjects: %w", err)
	}
	return out, nil
}

// ErasedIn returns the subjects erased in namespace that payload holds as
// erase finds them (Holds): a JSON payload's string tokens, values and
// keys; none for a body that is not JSON, whose subjects erase finds as
// text and no digest lookup can. Replay, drift repairs and re-fetches
// check what they are about to write with it.
func ErasedIn(ctx context.Context, q Queryer, namespace string, payload []byte) ([]string, error) {
	var values []string
	dec := json.NewDecoder(bytes.NewReader(payload))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if str, ok := tok.(string); ok && str != "" {
			values = append(values, str)
		}
	}
	found, err := ErasedValues(ctx, q, namespace, values)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range values {
		if found[v] {
			out = append(out, v)
			delete(found, v)
		}
	}
	return out, nil
}

// ErasedIn is the package's ErasedIn on the ledger's database.
func (s *Store) ErasedIn(ctx context.Context, namespace string, payload []byte) ([]string, error) {
	return ErasedIn(ctx, s.db, namespace, payload)
}
