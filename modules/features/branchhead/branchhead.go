package branchhead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Register adds the module's handler.
func Register(reg *ledger.Registry) {
	reg.Handle("github", "push", applyPush)
}

// push is the part of a push event used.
type push struct {
	Ref        string `json:"ref"`
	Before     string `json:"before"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository struct {
		FullName string          `json:"full_name"`
		PushedAt json.RawMessage `json:"pushed_at"`
	} `json:"repository"`
}

func applyPush(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	// One pass over the push, skipping its commits and the repository's
	// other fields without decoding them.
	var p push
	err := provider.DecodeFields(ev.Payload, provider.Field{Name: "ref", Dst: &p.Ref}, provider.Field{Name: "before", Dst: &p.Before},
		provider.Field{Name: "after", Dst: &p.After}, provider.Field{Name: "deleted", Dst: &p.Deleted},
		provider.Field{Name: "repository", Fields: []provider.Field{
			{Name: "full_name", Dst: &p.Repository.FullName}, {Name: "pushed_at", Dst: &p.Repository.PushedAt}}})
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode push: %w", err))
	}
	if p.Ref == "" || p.Repository.FullName == "" {
		return ledger.Permanent(errors.New("push without ref or repository.full_name"))
	}
	var pushedAt int64
	// Push payloads carry pushed_at as Unix seconds; other events as a string.
	if err := json.Unmarshal(p.Repository.PushedAt, &pushedAt); err != nil {
		return ledger.Permanent(fmt.Errorf("push repository.pushed_at %s: %w", p.Repository.PushedAt, err))
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO github_branch AS b (repository, ref, head_sha, deleted, pushed_at, delivery_id)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (repository, ref) DO UPDATE
		SET head_sha = EXCLUDED.head_sha, deleted = EXCLUDED.deleted, pushed_at = EXCLUDED.pushed_at,
			delivery_id = EXCLUDED.delivery_id, updated_at = CURRENT_TIMESTAMP
		WHERE b.pushed_at < EXCLUDED.pushed_at
			OR (b.pushed_at = EXCLUDED.pushed_at AND b.head_sha = $7)`,
		p.Repository.FullName, p.Ref, p.After, p.Deleted || strings.Trim(p.After, "0") == "", pushedAt, ev.EventID, p.Before)
	if err != nil {
		return fmt.Errorf("record push %s %s: %w", p.Repository.FullName, p.Ref, err)
	}
	return nil
}
