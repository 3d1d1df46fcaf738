package branchhead_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/branchhead"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

func setup(t *testing.T) *ledgertest.Harness {
	t.Helper()
	return ledgertest.New(t, 0, func(h *ledgertest.Harness) { branchhead.Register(h.Registry) })
}

func head(t *testing.T, h *ledgertest.Harness, repo, ref string) (string, bool) {
	t.Helper()
	var (
		sha     string
		deleted bool
	)
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT head_sha, deleted FROM github_branch WHERE repository = $1 AND ref = $2`, repo, ref).Scan(&sha, &deleted))
	return sha, deleted
}

func push(before, after string, pushedAt int64) []byte {
	return []byte(fmt.Sprintf(`{"ref":"refs/heads/main","before":%q,"after":%q,"deleted":false,"repository":{"full_name":"acme/api","pushed_at":%d}}`, before, after, pushedAt))
}

// TestPushIsNaturallyIdempotent: applying a push twice, even past the
// ledger, leaves the same head.
func TestPushIsNaturallyIdempotent(t *testing.T) {
	t.Parallel()
	h := setup(t)
	body, err := os.ReadFile("../../../testdata/providers/github/push.with-new-branch.json")
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "github", "d-1", "push", body))
	require.NoError(t, h.Apply(t, "github", "d-1", true))
	sha, deleted := head(t, h, "Codertocat/Hello-World", "refs/heads/master")
	require.Equal(t, "6113728f27ae82c7b1a177c8d03f9e96e0adf246", sha)
	require.False(t, deleted)

	tag, err := os.ReadFile("../../../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "github", "d-2", "push", tag))
	_, deleted = head(t, h, "Codertocat/Hello-World", "refs/tags/simple-tag")
	require.True(t, deleted)
}

func TestOlderPushNeverMovesBack(t *testing.T) {
	t.Parallel()
	h := setup(t)
	require.NoError(t, h.Deliver(t, "github", "d-new", "push", push("bbb", "ccc", 200)))
	require.NoError(t, h.Deliver(t, "github", "d-old", "push", push("aaa", "bbb", 100)))
	sha, _ := head(t, h, "acme/api", "refs/heads/main")
	require.Equal(t, "ccc", sha)
}

func TestSameSecondPushesFollowTheChain(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"first", "second"}, {"second", "first"}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			pushes := map[string][]byte{"first": push("aaa", "bbb", 300), "second": push("bbb", "ccc", 300)}
			for _, name := range order {
				require.NoError(t, h.Deliver(t, "github", name, "push", pushes[name]))
			}
			sha, _ := head(t, h, "acme/api", "refs/heads/main")
			require.Equal(t, "ccc", sha)
		})
	}
}

// TestNullPushedAtIsTimeZero: a push whose repository.pushed_at is null is
// recorded at time zero, as decoding it into a struct reads it, and a
// later push moves the branch on; one without pushed_at is refused.
func TestNullPushedAtIsTimeZero(t *testing.T) {
	t.Parallel()
	h := setup(t)
	null := []byte(`{"ref":"refs/heads/dev","before":"aaa","after":"bbb","deleted":false,"repository":{"full_name":"acme/api","pushed_at":null}}`)
	require.NoError(t, h.Deliver(t, "github", "d-null", "push", null))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM github_branch WHERE ref = 'refs/heads/dev' AND head_sha = 'bbb' AND pushed_at = 0`))
	later := []byte(`{"ref":"refs/heads/dev","before":"bbb","after":"ccc","deleted":false,"repository":{"full_name":"acme/api","pushed_at":5}}`)
	require.NoError(t, h.Deliver(t, "github", "d-later", "push", later))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM github_branch WHERE ref = 'refs/heads/dev' AND head_sha = 'ccc'`))
	absent := []byte(`{"ref":"refs/heads/x","before":"a","after":"b","deleted":false,"repository":{"full_name":"acme/api"}}`)
	require.True(t, ledger.IsPermanent(h.Deliver(t, "github", "d-absent", "push", absent)))
}

// TestBatchTakesBranchesInKeyOrder: an apply of many pushes writes their
// branches in (repository, ref) order, whatever the order of its events,
// so two applies that share branches take their row locks in one order
// and cannot deadlock; pushes to one branch keep the ledger's order.
func TestBatchTakesBranchesInKeyOrder(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) { branchhead.Register(h.Registry) })
	_, err := h.DB.SQL.Exec(`
		CREATE TABLE branch_order (n serial, repository text, ref text);
		CREATE FUNCTION log_branch() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO branch_order (repository, ref) VALUES (NEW.repository, NEW.ref); RETURN NEW; END $$;
		CREATE TRIGGER log_branch BEFORE INSERT ON github_branch FOR EACH ROW EXECUTE FUNCTION log_branch()`)
	require.NoError(t, err)
	to := func(repo, before, after string, at int64) []byte {
		return []byte(fmt.Sprintf(`{"ref":"refs/heads/main","before":%q,"after":%q,"deleted":false,"repository":{"full_name":%q,"pushed_at":%d}}`,
			before, after, repo, at))
	}
	// The ledger applies e1 to e5 in that order; their repositories run
	// the other way. e3 and e4 are one branch's chain within a second.
	keys := h.InsertBatch(t, "github",
		ledgertest.BatchEvent{ID: "e1", Type: "push", Payload: to("acme/z", "0", "z1", 100)},
		ledgertest.BatchEvent{ID: "e2", Type: "push", Payload: to("acme/y", "0", "y1", 100)},
		ledgertest.BatchEvent{ID: "e3", Type: "push", Payload: to("acme/x", "x0", "x1", 100)},
		ledgertest.BatchEvent{ID: "e4", Type: "push", Payload: to("acme/x", "x1", "x2", 100)},
		ledgertest.BatchEvent{ID: "e5", Type: "push", Payload: to("acme/w", "0", "w1", 100)})
	for _, k := range keys {
		h.WaitSettled(t, k.Namespace, k.EventID)
	}
	require.Equal(t, []string{"acme/w", "acme/x", "acme/x", "acme/y", "acme/z"},
		dbtest.Strings(t, h.DB.SQL, `SELECT repository FROM branch_order ORDER BY n`))
	sha, _ := head(t, h, "acme/x", "refs/heads/main")
	require.Equal(t, "x2", sha, "the branch's pushes in the ledger's order")
}

// TestFuturePushedAtIsRefused: a push whose pushed_at has not come (the
// largest int64, from an unsigned replay or a broken sender) fails for
// good and never pins the branch against later pushes.
func TestFuturePushedAtIsRefused(t *testing.T) {
	t.Parallel()
	h := setup(t)
	err := h.Deliver(t, "github", "d-future", "push", push("aaa", "zzz", 9223372036854775807))
	require.True(t, ledger.IsPermanent(err), "%v", err)
	require.NoError(t, h.Deliver(t, "github", "d-real", "push", push("aaa", "bbb", 1_700_000_000)))
	sha, _ := head(t, h, "acme/api", "refs/heads/main")
	require.Equal(t, "bbb", sha)
}

// TestNamespacesKeepTheirOwnBranches: a push signed by a second GitHub
// source (its own ledger namespace) of the same repository and ref moves
// that source's branch head, never the first source's.
func TestNamespacesKeepTheirOwnBranches(t *testing.T) {
	t.Parallel()
	h := setup(t)
	require.NoError(t, h.Deliver(t, "github", "d-first", "push", push("aaa", "bbb", 100)))
	res, err := h.Claimer.Claim(context.Background(), ledger.Claim{
		Namespace: "github-other", EventID: "d-second", Provider: "github", Source: "github-other", Type: "push", Payload: push("xxx", "yyy", 200),
	})
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	require.NoError(t, h.Apply(t, "github-other", "d-second", false))

	heads := map[string]string{}
	rows, err := h.DB.SQL.Query(`SELECT namespace, head_sha FROM github_branch WHERE repository = 'acme/api' AND ref = 'refs/heads/main'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var ns, sha string
		require.NoError(t, rows.Scan(&ns, &sha))
		heads[ns] = sha
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"github": "bbb", "github-other": "yyy"}, heads, "one head per namespace")
}
