package app_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestUnsignedHeaderIDCannotReplayABody: a source whose ids come from a
// header the signature does not cover (id.header) claims one captured
// delivery once, whatever ids copies of it come under, one after another
// or all at once; another signed body under its own id is another event.
func TestUnsignedHeaderIDCannotReplayABody(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: slack-cmds
    provider: slack
    namespace: slack-cmds
    secrets: [cmds_secret]
    tolerance: 0
    id:
      header: X-Event-Id
`), 0o600))
	s := start(t, map[string]string{"HOOKLEDGER_CONFIG": path})
	body := []byte(`{"type":"event_callback","team_id":"T1","event":{"type":"app_mention","text":"deploy"}}`)
	signed, err := provider.Slack.Sign("cmds_secret", provider.Delivery{Body: body})
	require.NoError(t, err)
	post := func(id string, b []byte, h http.Header) string {
		h = h.Clone()
		h.Set("X-Event-Id", id)
		code, out := s.post(t, "/webhooks/slack-cmds", b, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["status"].(string)
	}
	require.Equal(t, "claimed", post("evt_genuine", body, signed))
	for i := range 4 {
		require.Equal(t, "duplicate", post(fmt.Sprintf("evt_forged_%d", i), body, signed), "a copy under a new id")
	}
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/slack-cmds", bytes.NewReader(body))
			if err != nil {
				return
			}
			req.Header = signed.Clone()
			req.Header.Set("X-Event-Id", fmt.Sprintf("evt_storm_%d", i))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				codes[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for _, code := range codes {
		require.Equal(t, http.StatusOK, code, "every copy is answered duplicate")
	}
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'slack-cmds'`))

	other := []byte(`{"type":"event_callback","team_id":"T1","event":{"type":"app_mention","text":"rollback"}}`)
	h, err := provider.Slack.Sign("cmds_secret", provider.Delivery{Body: other})
	require.NoError(t, err)
	require.Equal(t, "claimed", post("evt_second", other, h))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'slack-cmds'`))
}
