package app_test

import (
	"bytes"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestEventIDsWithSlashesReachable: an event id may hold '/' (and '%'),
// and /admin/events/{event_id} reaches it with the id path-escaped (%2F),
// for show, discard and requeue alike, even an id that ends in
// "/requeue" or holds "%2F" itself; the console's links reach its page.
func TestEventIDsWithSlashesReachable(t *testing.T) {
	t.Parallel()
	// No workers: the events stay claimed, so they can be discarded.
	s := startOn(t, dbtest.New(t), map[string]string{"ADMIN_TOKEN": adminToken}, config.RoleHTTP)
	ids := []string{"evt_a/b", "evt_c/requeue", "evt_d%2Fe", "evt_f/g/h"}
	for _, id := range ids {
		body := subEvent(id, "active", time.Now().Unix())
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code, "%s: %v", id, out)
		require.Equal(t, "claimed", out["status"], id)
	}
	send := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		var r bytes.Buffer
		if body != nil {
			require.NoError(t, json.NewEncoder(&r).Encode(body))
		}
		req, err := http.NewRequest(method, s.base+path, &r)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, id := range ids {
		path := "/admin/events/" + url.PathEscape(id)
		code, out := send(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, code, "GET %s: %v", path, out)
		require.Equal(t, id, out["event"].(map[string]any)["event_id"], path)

		code, out = send(http.MethodPost, path+"/discard", map[string]string{"reason": "a slash test"})
		require.Equal(t, http.StatusOK, code, "discard %s: %v", path, out)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status = 'discarded'`, id), id)
		code, out = send(http.MethodPost, path+"/requeue", nil)
		require.Equal(t, http.StatusOK, code, "requeue %s: %v", path, out)
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status = 'claimed'`, id), id)
	}
	require.Equal(t, len(ids), s.db.Count(t, `SELECT count(*) FROM webhook_event`), "each id its own row, none other touched")

	code, page, _ := s.page(t, "/console/events", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	links := map[string]string{}
	for _, m := range regexp.MustCompile(`<a href="(/console/event\?[^"]*)">([^<]*)</a>`).FindAllStringSubmatch(page, -1) {
		links[html.UnescapeString(m[2])] = html.UnescapeString(m[1])
	}
	for _, id := range ids {
		link, ok := links[id]
		require.True(t, ok, "the events page links %s: %v", id, links)
		code, page, _ := s.page(t, link, basic(adminToken))
		require.Equal(t, http.StatusOK, code, link)
		require.Contains(t, page, html.EscapeString(id), link)
	}
}
