package ledger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
)

// Identity returns the ledger's identity (the ledger_identity row), which
// every Redis marker key carries: markers written for another database, or
// for this one before a restore, never answer for it.
func Identity(ctx context.Context, db *sql.DB) (string, error) {
	var id string
	if err := db.QueryRowContext(ctx, `SELECT identity FROM ledger_identity WHERE id = 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("read the ledger identity: %w", err)
	}
	return id, nil
}

// RenewIdentity gives the ledger a new identity and returns it: every
// Redis marker written before is ignored from then on, by every process
// started after it. Run it after restoring the database from a backup, or
// after a failover that may have lost acknowledged events.
func RenewIdentity(ctx context.Context, db *sql.DB) (string, error) {
	var id string
	err := db.QueryRowContext(ctx, `
		INSERT INTO ledger_identity (id, identity, renewed_at) VALUES (1, replace(gen_random_uuid()::text, '-', ''), now())
		ON CONFLICT (id) DO UPDATE SET identity = EXCLUDED.identity, renewed_at = EXCLUDED.renewed_at
		RETURNING identity`).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("renew the ledger identity: %w", err)
	}
	return id, nil
}

// FingerprintKey returns the deployment's fingerprint key (the
// ledger_identity row's fingerprint_key), which keys the secret
// fingerprints (provider.SecretFingerprint). The first process to start
// writes 32 random bytes; nothing renews them, so fingerprints stay the
// same across restarts and rotations, and on every process of the
// deployment. Of processes starting together one writes and the others
// read what it wrote (the update waits for its row lock).
func FingerprintKey(ctx context.Context, db *sql.DB) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make the fingerprint key: %w", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE ledger_identity SET fingerprint_key = $1 WHERE id = 1 AND fingerprint_key IS NULL`, fresh); err != nil {
		return nil, fmt.Errorf("write the fingerprint key: %w", err)
	}
	var key []byte
	if err := db.QueryRowContext(ctx, `SELECT fingerprint_key FROM ledger_identity WHERE id = 1`).Scan(&key); err != nil {
		return nil, fmt.Errorf("read the fingerprint key: %w", err)
	}
	return key, nil
}
