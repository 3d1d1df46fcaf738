package ledger

import (
	"context"
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
