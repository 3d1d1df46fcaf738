package branchhead_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/features/branchhead"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestConformance runs the ledger's suite on the push events of the
// corpus (GitHub's official examples, among them pushes of one tag
// repeated) and on two pushes of one second that only their before/after
// chain orders: every branch ends at its newest head, whatever the order,
// the batching, the duplicates, the forced re-applies or the concurrency.
// (Three pushes of one branch in one second end where their order of
// arrival leaves them: a→b, c→d, b→c applied in that order stop at c.)
func TestConformance(t *testing.T) {
	t.Parallel()
	corpus := ledgertest.Corpus(t, func(p, typ string) bool { return p == "github" && typ == "push" })
	events := ledgertest.Events(corpus)
	to := func(id, repo, ref, before, after string, at int64) ledgertest.Event {
		return ledgertest.Event{Provider: "github", ID: id, Type: "push", Payload: fmt.Appendf(nil,
			`{"ref":%q,"before":%q,"after":%q,"deleted":false,"repository":{"full_name":%q,"pushed_at":%d}}`, ref, before, after, repo, at)}
	}
	events = append(events,
		to("d-conf-1", "acme/api", "refs/heads/main", "a1", "a2", 1_700_000_100),
		to("d-conf-2", "acme/api", "refs/heads/main", "a2", "a3", 1_700_000_100),
		to("d-conf-4", "acme/api", "refs/heads/main", "a0", "a1", 1_700_000_050),
		to("d-conf-5", "acme/web", "refs/heads/main", "w1", "w2", 1_700_000_200),
		to("d-conf-6", "acme/web", "refs/heads/dev", "v1", "v2", 1_700_000_300),
	)
	want := map[string]string{"acme/api refs/heads/main": "a3", "acme/web refs/heads/main": "w2", "acme/web refs/heads/dev": "v2"}
	for _, c := range corpus {
		var ev struct {
			Ref        string `json:"ref"`
			After      string `json:"after"`
			Repository struct {
				FullName string `json:"full_name"`
			} `json:"repository"`
		}
		require.NoError(t, json.Unmarshal(c.Payload, &ev), c.File)
		want[ev.Repository.FullName+" "+ev.Ref] = ev.After // the corpus's pushes of a branch all move it to one head
	}

	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) { branchhead.Register(h.Registry) },
		Events:   events,
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(*) FROM github_branch`))
			for key, sha := range want {
				require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM github_branch WHERE repository || ' ' || ref = $1 AND head_sha = $2`, key, sha),
					"%s at %s", key, sha)
			}
		},
		// Pushes that repeat one move may each be the one a branch names.
		State: `SELECT repository, ref, head_sha, deleted, pushed_at FROM github_branch`,
	})
}
