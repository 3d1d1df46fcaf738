package branchhead

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Register adds the module's handler and its write.
func Register(reg *ledger.Registry) {
	m := &module{pushes: ledger.NewWrite(reg, ledger.WriteFuncs[branch, []branchPush]{Merge: chain, Flush: flushPushes})}
	ledger.On(reg, "github", "push", m.applyPush)
}

type module struct {
	pushes *ledger.Write[branch, []branchPush]
}

// push is the part of a push event used. Push payloads carry
// repository.pushed_at as Unix seconds (other events as a string). It is
// read raw: null reads as time zero, as decoding it into an integer does,
// but a push without it is refused.
type push struct {
	Ref      string          `field:"ref,required"`
	Before   string          `field:"before"`
	After    string          `field:"after"`
	Deleted  bool            `field:"deleted"`
	FullName string          `field:"repository.full_name,required"`
	PushedAt json.RawMessage `field:"repository.pushed_at"`
}

func (m *module) applyPush(_ context.Context, tx *ledger.Tx, ev *ledger.Event, p push) error {
	var pushedAt int64
	if err := json.Unmarshal(p.PushedAt, &pushedAt); err != nil {
		return ledger.Permanent(fmt.Errorf("push repository.pushed_at %s: %w", p.PushedAt, err))
	}
	// The version a branch keeps: a time that has not come (a forged or
	// broken push) would pin the branch against every later push.
	if pushedAt < 0 || pushedAt > time.Now().Add(provider.MaxFutureSkew).Unix() {
		return ledger.Permanent(fmt.Errorf("push repository.pushed_at %d is not a time a push happened at", pushedAt))
	}
	m.pushes.Put(tx, branch{Namespace: ev.Namespace, Repository: p.FullName, Ref: p.Ref}, []branchPush{{
		after: p.After, before: p.Before, deleted: p.Deleted || strings.Trim(p.After, "0") == "", pushedAt: pushedAt, deliveryID: ev.EventID,
	}})
	return nil
}

// branch is a github_branch row's unique key. Namespace is the ledger
// namespace of the push: each source's branches are its own.
type branch struct{ Namespace, Repository, Ref string }

// branchPush is one push's write.
type branchPush struct {
	after, before, deliveryID string
	deleted                   bool
	pushedAt                  int64
}

// chain keeps a branch's pushes in the order they were applied: whether a
// push of the same second as the head moves it depends on the head the
// push before it left (flushPushes).
func chain(older, newer []branchPush) []branchPush { return append(older, newer...) }

// flushPushes writes the pushes, branch by branch and each branch's in
// the order they were applied: each moves its branch's head when it is
// newer than the stored one, or of the same second and the next in the
// chain.
func flushPushes(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[branch, []branchPush]) error {
	for _, e := range entries {
		for _, p := range e.Value {
			_, err := tx.ExecContext(ctx, `
				INSERT INTO github_branch AS b (namespace, repository, ref, head_sha, deleted, pushed_at, delivery_id)
				VALUES ($8, $1, $2, $3, $4, $5, $6)
				ON CONFLICT (namespace, repository, ref) DO UPDATE
				SET head_sha = EXCLUDED.head_sha, deleted = EXCLUDED.deleted, pushed_at = EXCLUDED.pushed_at,
					delivery_id = EXCLUDED.delivery_id, updated_at = CURRENT_TIMESTAMP
				WHERE b.pushed_at < EXCLUDED.pushed_at
					OR (b.pushed_at = EXCLUDED.pushed_at AND b.head_sha = $7)`,
				e.Key.Repository, e.Key.Ref, p.after, p.deleted, p.pushedAt, p.deliveryID, p.before, e.Key.Namespace)
			if err != nil {
				return fmt.Errorf("record push %s %s: %w", e.Key.Repository, e.Key.Ref, err)
			}
		}
	}
	return nil
}
