package branchhead

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
	// The version a branch keeps: a time that has not come (a forged or
	// broken push) would pin the branch against every later push.
	if pushedAt < 0 || pushedAt > time.Now().Add(provider.MaxFutureSkew).Unix() {
		return ledger.Permanent(fmt.Errorf("push repository.pushed_at %d is not a time a push happened at", pushedAt))
	}
	ledger.Stage(tx, pushesKey{}, func() *pushes { return &pushes{} }).add(branchPush{
		repository: p.Repository.FullName, ref: p.Ref, after: p.After, before: p.Before,
		deleted: p.Deleted || strings.Trim(p.After, "0") == "", pushedAt: pushedAt, deliveryID: ev.EventID,
	})
	return nil
}

// pushesKey stages the module's writes in an apply transaction.
type pushesKey struct{}

// pushes are the pushes of one apply transaction, written when it ends
// (ledger.Staged) in (repository, ref) order, whatever the order of its
// events: two applies that share branches then take the branches' row
// locks in one order and cannot deadlock, as they did when each push was
// written as the apply reached it. The pushes to one branch keep the
// apply's order, so each is decided against what the one before left.
type pushes struct {
	list []branchPush
}

// branchPush is one push's write.
type branchPush struct {
	repository, ref, after, before, deliveryID string
	deleted                                    bool
	pushedAt                                   int64
}

func (ps *pushes) add(p branchPush) { ps.list = append(ps.list, p) }

// Flush writes the pushes: each moves its branch's head when it is newer
// than the stored one, or of the same second and the next in the chain.
func (ps *pushes) Flush(ctx context.Context, tx *ledger.Tx) error {
	slices.SortStableFunc(ps.list, func(a, b branchPush) int {
		return cmp.Or(strings.Compare(a.repository, b.repository), strings.Compare(a.ref, b.ref))
	})
	for _, p := range ps.list {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO github_branch AS b (repository, ref, head_sha, deleted, pushed_at, delivery_id)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (repository, ref) DO UPDATE
			SET head_sha = EXCLUDED.head_sha, deleted = EXCLUDED.deleted, pushed_at = EXCLUDED.pushed_at,
				delivery_id = EXCLUDED.delivery_id, updated_at = CURRENT_TIMESTAMP
			WHERE b.pushed_at < EXCLUDED.pushed_at
				OR (b.pushed_at = EXCLUDED.pushed_at AND b.head_sha = $7)`,
			p.repository, p.ref, p.after, p.deleted, p.pushedAt, p.deliveryID, p.before)
		if err != nil {
			return fmt.Errorf("record push %s %s: %w", p.repository, p.ref, err)
		}
	}
	return nil
}
