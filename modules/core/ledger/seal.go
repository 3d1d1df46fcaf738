package ledger

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Payload encryption at rest (PAYLOAD_KEYS). A sealed payload is stored as
//
//	sealed:v1:<key id>:<base64 of nonce and ciphertext>
//
// AES-256-GCM under the key named by its id (the first 4 bytes of its
// SHA-256, in hex), with the event's namespace and id as additional data:
// a sealed payload copied onto another row does not open. A payload
// without the prefix is plaintext, stored before encryption was turned on
// (a JSON body starts with { or [, a form body with its first field).
const sealedPrefix = "sealed:v1:"

// PayloadKeySize is the length of a PAYLOAD_KEYS key: AES-256.
const PayloadKeySize = 32

// ErrPayloadKey is a sealed payload no configured key opens.
var ErrPayloadKey = errors.New("no key in PAYLOAD_KEYS opens this payload")

// Sealer seals payloads with its first key and opens them with any. The
// zero Sealer (nil) seals nothing and opens plaintext only.
type Sealer struct {
	ids   []string // key ids, first the sealing key's
	aeads map[string]cipher.AEAD
}

// NewSealer is a Sealer of keys (PayloadKeySize bytes each): the first
// seals, all open. No keys is nil: payloads stay plaintext.
func NewSealer(keys [][]byte) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	s := &Sealer{aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if len(k) != PayloadKeySize {
			return nil, fmt.Errorf("key %d is %d bytes, want %d", i+1, len(k), PayloadKeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		id := KeyID(k)
		if _, dup := s.aeads[id]; dup {
			return nil, fmt.Errorf("key %d is given twice", i+1)
		}
		s.ids = append(s.ids, id)
		s.aeads[id] = aead
	}
	return s, nil
}

// KeyID names a payload key in sealed payloads, without revealing it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// SealingKeyID is the id of the key that seals; empty for none.
func (s *Sealer) SealingKeyID() string {
	if s == nil {
		return ""
	}
	return s.ids[0]
}

// additional is what binds a sealed payload to its row.
func additional(k EventKey) []byte {
	return []byte(k.Namespace + "\x00" + k.EventID)
}

// Seal returns plaintext sealed for the row of k, or plaintext itself when
// s is nil.
func (s *Sealer) Seal(k EventKey, plaintext []byte) []byte {
	if s == nil {
		return plaintext
	}
	aead := s.aeads[s.ids[0]]
	buf := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(buf); err != nil {
		panic(err) // crypto/rand does not fail
	}
	sealed := aead.Seal(buf, buf, plaintext, additional(k))
	head := sealedPrefix + s.ids[0] + ":"
	out := make([]byte, len(head)+base64.RawStdEncoding.EncodedLen(len(sealed)))
	copy(out, head)
	base64.RawStdEncoding.Encode(out[len(head):], sealed)
	return out
}

// Sealed reports whether a stored payload is sealed, and by which key.
func Sealed(stored []byte) (keyID string, ok bool) {
	rest, ok := strings.CutPrefix(string(stored[:min(len(stored), len(sealedPrefix)+9)]), sealedPrefix)
	if !ok {
		return "", false
	}
	id, _, found := strings.Cut(rest, ":")
	return id, found
}

// Open returns the plaintext of the stored payload of the row of k: a
// plaintext payload as it is, a sealed one opened by the key it names.
func (s *Sealer) Open(k EventKey, stored []byte) ([]byte, error) {
	id, sealed := Sealed(stored)
	if !sealed {
		return stored, nil
	}
	var aead cipher.AEAD
	if s != nil {
		aead = s.aeads[id]
	}
	if aead == nil {
		return nil, fmt.Errorf("payload of %s/%s is sealed with key %s: %w", k.Namespace, k.EventID, id, ErrPayloadKey)
	}
	raw, err := base64.RawStdEncoding.DecodeString(string(stored[len(sealedPrefix)+len(id)+1:]))
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, fmt.Errorf("payload of %s/%s: a sealed payload that is not well formed", k.Namespace, k.EventID)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], additional(k))
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s does not open with key %s (altered, or moved from another row)", k.Namespace, k.EventID, id)
	}
	return plain, nil
}

// sealCheckRows is how many of the newest ledger rows CheckSealer reads.
const sealCheckRows = 1000

// CheckSealer refuses a configuration that cannot open the payloads the
// ledger stores: among its newest rows, one sealed by a key that s lacks
// (a wrong or missing PAYLOAD_KEYS entry), or one that s's key of that id
// does not open (a different key given the same id cannot happen: the id
// is the key's hash). It reads a bounded number of rows.
func CheckSealer(ctx context.Context, db *sql.DB, s *Sealer) error {
	rows, err := db.QueryContext(ctx, `
		SELECT DISTINCT ON (substring(payload FROM 11 FOR 8)) namespace, event_id, payload
		FROM (SELECT namespace, event_id, payload FROM webhook_event ORDER BY received_at DESC LIMIT $1) AS newest
		WHERE payload LIKE '`+sealedPrefix+`%'`, sealCheckRows)
	if err != nil {
		return fmt.Errorf("check PAYLOAD_KEYS against stored payloads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k EventKey
			p []byte
		)
		if err := rows.Scan(&k.Namespace, &k.EventID, &p); err != nil {
			return err
		}
		if _, err := s.Open(k, p); err != nil {
			if s == nil {
				return fmt.Errorf("stored payloads are sealed but PAYLOAD_KEYS is not set: %w", err)
			}
			return fmt.Errorf("PAYLOAD_KEYS cannot open stored payloads (a key missing or wrong): %w", err)
		}
	}
	return rows.Err()
}

// rekeyBatch is how many rows one Rekey statement rewrites.
const rekeyBatch = 500

// Rekey seals with the sealing key every stored payload that is plaintext
// or sealed by another key (after a key rotation, or encryption turned
// on), a batch at a time, each its own statement, and returns how many it
// rewrote. It can stop anywhere and run again: it only takes what is not
// yet under the sealing key. Erased payloads are left as they are.
func (s *Store) Rekey(ctx context.Context) (int64, error) {
	if s.sealer == nil {
		return 0, errors.New("rekey: PAYLOAD_KEYS is not set")
	}
	current := sealedPrefix + s.sealer.SealingKeyID() + ":%"
	var total int64
	for after := int64(0); ; {
		batch, err := s.openStored(ctx, after, rekeyBatch, `erased_at IS NULL AND payload NOT LIKE $2`, current)
		if err != nil {
			return total, fmt.Errorf("rekey: %w", err)
		}
		if len(batch) == 0 {
			return total, nil
		}
		after = batch[len(batch)-1].id
		ids, olds, sealeds := make([]int64, len(batch)), make([]string, len(batch)), make([]string, len(batch))
		for i, p := range batch {
			ids[i], olds[i], sealeds[i] = p.id, string(p.stored), string(s.sealer.Seal(p.key, p.plain))
		}
		// A payload changed meanwhile (erased) is left for the next run.
		res, err := s.db.ExecContext(ctx, `
			UPDATE webhook_event e SET payload = v.sealed
			FROM unnest($1::bigint[], $2::text[], $3::text[]) AS v(id, old, sealed)
			WHERE e.id = v.id AND e.payload = v.old AND e.erased_at IS NULL`, ids, olds, sealeds)
		if err != nil {
			return total, fmt.Errorf("rekey: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
}

// openedPayload is a stored payload and its plaintext.
type openedPayload struct {
	id            int64
	key           EventKey
	stored, plain []byte
}

// openStored reads, in id order after the id after, at most limit rows
// that where selects (a condition on webhook_event whose parameters are
// args from $2) and opens their payloads.
func (s *Store) openStored(ctx context.Context, after int64, limit int, where string, args ...any) ([]openedPayload, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT id, namespace, event_id, payload FROM webhook_event
		WHERE id > $1 AND `+where+`
		ORDER BY id LIMIT `+strconv.Itoa(limit), append([]any{after}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []openedPayload
	for rows.Next() {
		var p openedPayload
		if err := rows.Scan(&p.id, &p.key.Namespace, &p.key.EventID, &p.stored); err != nil {
			return nil, err
		}
		if p.plain, err = s.sealer.Open(p.key, p.stored); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
