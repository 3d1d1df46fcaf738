package ledger

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// ErrPayloadKey is a sealed payload no configured key opens: it names a
// key PAYLOAD_KEYS lacks.
var ErrPayloadKey = errors.New("no key in PAYLOAD_KEYS opens this payload")

// ErrPayloadCorrupt is a sealed payload that its key, which PAYLOAD_KEYS
// holds, does not open: altered, cut, or moved from another row.
var ErrPayloadCorrupt = errors.New("the sealed payload does not open with its key")

// Sealer seals payloads with its first key and opens them with any. The
// zero Sealer (nil) seals nothing and opens plaintext only.
type Sealer struct {
	ids   []string // key ids, first the sealing key's
	aeads map[string]cipher.AEAD
	// macKeys key the body identity digests (identity), one derived
	// from each payload key.
	macKeys map[string][]byte
}

// NewSealer is a Sealer of keys (PayloadKeySize bytes each): the first
// seals, all open. No keys is nil: payloads stay plaintext.
func NewSealer(keys [][]byte) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	s := &Sealer{aeads: make(map[string]cipher.AEAD, len(keys)), macKeys: make(map[string][]byte, len(keys))}
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
		derive := hmac.New(sha256.New, k)
		derive.Write([]byte("hookledger body identity"))
		s.macKeys[id] = derive.Sum(nil)
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

// identity is the digest a row keeps of its body identity (Claim.
// BodyIdentity): "sha256:<hex>" without payload keys; with them
// "<key id>:<hex>", an HMAC-SHA256 under a key derived from the sealing
// key, so that the digest confirms no guessed body to whoever reads the
// database without the keys.
func (s *Sealer) identity(sum []byte) string {
	if s == nil {
		return identityPlain + hex.EncodeToString(sum)
	}
	return s.identityUnder(s.ids[0], sum)
}

// identityPlain prefixes an unkeyed identity digest.
const identityPlain = "sha256:"

// identityUnder is the identity digest of sum under the key of id; ""
// when s does not hold it.
func (s *Sealer) identityUnder(id string, sum []byte) string {
	key, ok := s.macKeys[id]
	if !ok {
		return ""
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(sum)
	return id + ":" + hex.EncodeToString(mac.Sum(nil))
}

// sameIdentity reports whether stored (a row's identity digest) is sum's;
// known is false when it cannot tell: no digest, or one under a key s no
// longer holds.
func (s *Sealer) sameIdentity(stored string, sum []byte) (same, known bool) {
	if stored == "" {
		return false, false
	}
	if strings.HasPrefix(stored, identityPlain) {
		return hmac.Equal([]byte(stored), []byte(identityPlain+hex.EncodeToString(sum))), true
	}
	id, _, _ := strings.Cut(stored, ":")
	if s == nil {
		return false, false
	}
	want := s.identityUnder(id, sum)
	if want == "" {
		return false, false
	}
	return hmac.Equal([]byte(stored), []byte(want)), true
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
		return nil, fmt.Errorf("payload of %s/%s: a sealed payload that is not well formed: %w", k.Namespace, k.EventID, ErrPayloadCorrupt)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], additional(k))
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s does not open with key %s (altered, or moved from another row): %w", k.Namespace, k.EventID, id, ErrPayloadCorrupt)
	}
	return plain, nil
}

// hasKey reports whether s holds the key of id.
func (s *Sealer) hasKey(id string) bool {
	if s == nil {
		return false
	}
	_, ok := s.aeads[id]
	return ok
}

// sealCheckRows is how many of the newest ledger rows CheckSealer reads.
const sealCheckRows = 1000

// SealerCheck is what CheckSealer found among the newest ledger rows.
type SealerCheck struct {
	// Rows is how many of the newest rows it read; Sealed, how many of
	// them hold a sealed payload.
	Rows, Sealed int
	// Unknown counts, by key id, the sealed payloads whose key
	// PAYLOAD_KEYS lacks: no key opens them.
	Unknown map[string]int
}

// Unreadable is how many of the sealed payloads CheckSealer read name a
// key PAYLOAD_KEYS lacks.
func (c SealerCheck) Unreadable() int {
	n := 0
	for _, k := range c.Unknown {
		n += k
	}
	return n
}

// CheckSealer reads the key ids of the newest stored payloads (a bounded
// number of rows, only the first bytes of each) and refuses a
// configuration that plainly cannot open them: most of the sealed ones
// name a key that s lacks (a wrong or missing PAYLOAD_KEYS entry, or
// PAYLOAD_KEYS unset). A few such rows (a restored backup, a key removed
// before rekey reached its rows) are counted, not refused: they fail
// their apply with the reason until their key is back, and erase and
// rekey skip them. Whether a configured key opens a payload is not
// checked here, since a key's id is its hash: a payload under a
// configured key that does not open is that row's damage, which
// CheckPayloads finds.
func CheckSealer(ctx context.Context, db *sql.DB, s *Sealer) (SealerCheck, error) {
	c := SealerCheck{Unknown: map[string]int{}}
	// The newest rows first, then the head of each: never more than
	// sealCheckRows payloads are read, and of each only its first bytes.
	rows, err := db.QueryContext(ctx, `
		SELECT substring(payload FROM 1 FOR $2)
		FROM (SELECT payload FROM webhook_event ORDER BY received_at DESC LIMIT $1) AS newest`,
		sealCheckRows, len(sealedPrefix)+9)
	if err != nil {
		return c, fmt.Errorf("check PAYLOAD_KEYS against stored payloads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var head []byte
		if err := rows.Scan(&head); err != nil {
			return c, fmt.Errorf("check PAYLOAD_KEYS against stored payloads: %w", err)
		}
		c.Rows++
		id, sealed := Sealed(head)
		if !sealed {
			continue
		}
		c.Sealed++
		if !s.hasKey(id) {
			c.Unknown[id]++
		}
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("check PAYLOAD_KEYS against stored payloads: %w", err)
	}
	if n := c.Unreadable(); n > 0 && 2*n > c.Sealed {
		ids := slices.Sorted(maps.Keys(c.Unknown))
		if s == nil {
			return c, fmt.Errorf("stored payloads are sealed but PAYLOAD_KEYS is not set: %d of the %d newest sealed payloads need key %s: %w",
				n, c.Sealed, strings.Join(ids, ", "), ErrPayloadKey)
		}
		return c, fmt.Errorf("PAYLOAD_KEYS cannot open stored payloads (a key missing or wrong): %d of the %d newest sealed payloads need key %s: %w",
			n, c.Sealed, strings.Join(ids, ", "), ErrPayloadKey)
	}
	return c, nil
}

// rekeyBatch is how many rows one Rekey statement rewrites.
const rekeyBatch = 500

// RekeyReport says what Rekey did.
type RekeyReport struct {
	// Sealed is how many payloads it sealed with the sealing key.
	Sealed int64
	// Unreadable are the payloads it left because no key opens them
	// (CheckSealed lists the same rows).
	Unreadable []UnreadablePayload
}

// Rekey seals with the sealing key every stored payload that is plaintext
// or sealed by another key (after a key rotation, or encryption turned
// on), a batch at a time, each its own statement, and reports how many it
// rewrote. A payload no key opens is left as it is and reported. It can
// stop anywhere and run again: it only takes what is not yet under the
// sealing key. Erased payloads are left as they are.
func (s *Store) Rekey(ctx context.Context) (RekeyReport, error) {
	var r RekeyReport
	if s.sealer == nil {
		return r, errors.New("rekey: PAYLOAD_KEYS is not set")
	}
	current := sealedPrefix + s.sealer.SealingKeyID() + ":%"
	for after := int64(0); ; {
		batch, unreadable, last, err := s.openStored(ctx, after, rekeyBatch, `erased_at IS NULL AND payload NOT LIKE $2`, current)
		if err != nil {
			return r, fmt.Errorf("rekey: %w", err)
		}
		r.Unreadable = append(r.Unreadable, unreadable...)
		if last == 0 {
			return r, nil
		}
		after = last
		if len(batch) == 0 {
			continue
		}
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
			return r, fmt.Errorf("rekey: %w", err)
		}
		n, _ := res.RowsAffected()
		r.Sealed += n
	}
}

// Why a stored payload does not open: the values of
// UnreadablePayload.Reason.
const (
	// UnreadableUnknownKey is a payload sealed by a key PAYLOAD_KEYS
	// lacks (ErrPayloadKey): a restored backup, a key removed before
	// rekey reached the row. It opens once the key is back.
	UnreadableUnknownKey = "unknown_key"
	// UnreadableCorrupt is a payload that its key, which PAYLOAD_KEYS
	// holds, does not open (ErrPayloadCorrupt): altered, cut, or moved
	// from another row.
	UnreadableCorrupt = "corrupt"
)

// UnreadablePayload is a stored payload no key opens. Reads of it fail
// (its apply fails with the reason); CheckSealed lists it, and erase and
// rekey pass it by.
type UnreadablePayload struct {
	EventKey
	// KeyID is the key id the payload names.
	KeyID  string `json:"key_id"`
	Reason string `json:"reason"`

	id int64
}

// SealedCheck is what CheckSealed found.
type SealedCheck struct {
	// Checked is how many stored payloads it read (erased ones are not);
	// Sealed, how many of them are sealed.
	Checked int64 `json:"checked"`
	Sealed  int64 `json:"sealed"`
	// Unreadable are the payloads no key opens, in id order.
	Unreadable []UnreadablePayload `json:"unreadable"`
}

// UnreadableByKey counts the unreadable payloads by the key id they name.
func (c SealedCheck) UnreadableByKey() map[string]int {
	out := map[string]int{}
	for _, u := range c.Unreadable {
		out[u.KeyID]++
	}
	return out
}

// checkBatch is how many rows one CheckSealed statement reads.
const checkBatch = 500

// CheckSealed opens every stored sealed payload, a batch at a time, and
// reports those that no key opens; plaintext and erased payloads are
// counted, not read.
func (s *Store) CheckSealed(ctx context.Context) (SealedCheck, error) {
	var c SealedCheck
	err := s.db.QueryRowContext(ctx, `
		SELECT count(*), count(*) FILTER (WHERE substring(payload FROM 1 FOR $1) = $2)
		FROM webhook_event WHERE erased_at IS NULL`, len(sealedPrefix), sealedPrefix).Scan(&c.Checked, &c.Sealed)
	if err != nil {
		return c, fmt.Errorf("check sealed payloads: %w", err)
	}
	for after := int64(0); ; {
		_, unreadable, last, err := s.openStored(ctx, after, checkBatch, `erased_at IS NULL AND payload LIKE '`+sealedPrefix+`%'`)
		if err != nil {
			return c, fmt.Errorf("check sealed payloads: %w", err)
		}
		c.Unreadable = append(c.Unreadable, unreadable...)
		if last == 0 {
			return c, nil
		}
		after = last
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
// args from $2) and opens their payloads. It returns those it opened,
// those no key opens, and the id of the last row it read (0 when it read
// none).
func (s *Store) openStored(ctx context.Context, after int64, limit int, where string, args ...any) (opened []openedPayload, unreadable []UnreadablePayload, last int64, err error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT id, namespace, event_id, payload FROM webhook_event
		WHERE id > $1 AND `+where+`
		ORDER BY id LIMIT `+strconv.Itoa(limit), append([]any{after}, args...)...)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var p openedPayload
		if err := rows.Scan(&p.id, &p.key.Namespace, &p.key.EventID, &p.stored); err != nil {
			return nil, nil, 0, err
		}
		last = p.id
		p.plain, err = s.sealer.Open(p.key, p.stored)
		switch {
		case errors.Is(err, ErrPayloadKey), errors.Is(err, ErrPayloadCorrupt):
			id, _ := Sealed(p.stored)
			reason := UnreadableCorrupt
			if errors.Is(err, ErrPayloadKey) {
				reason = UnreadableUnknownKey
			}
			unreadable = append(unreadable, UnreadablePayload{EventKey: p.key, KeyID: id, Reason: reason, id: p.id})
		case err != nil:
			return nil, nil, 0, err
		default:
			opened = append(opened, p)
		}
	}
	return opened, unreadable, last, rows.Err()
}
