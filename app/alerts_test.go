package app_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// alertMessage is a message the alert webhook received, with its headers.
type alertMessage struct {
	Status  string `json:"status"`
	Alert   string `json:"alert"`
	Key     string `json:"key"`
	Summary string `json:"summary"`
	Text    string `json:"text"`
	header  http.Header
	body    []byte
}

// alertReceiver is a local receiver of alert messages.
type alertReceiver struct {
	mu   sync.Mutex
	msgs []alertMessage
	url  string
}

func newAlertReceiver(t *testing.T) *alertReceiver {
	r := &alertReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var m alertMessage
		if json.Unmarshal(body, &m) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		m.header, m.body = req.Header.Clone(), body
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// of returns the messages of alert so far.
func (r *alertReceiver) of(alert string) []alertMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []alertMessage
	for _, m := range r.msgs {
		if m.Alert == alert {
			out = append(out, m)
		}
	}
	return out
}

// checksDone counts the alert checks that have run to completion.
func checksDone(t *testing.T, db *dbtest.DB) int {
	return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'alert_check' AND state = 'completed'`)
}

// awaitChecks waits until n more alert checks have completed after now.
func awaitChecks(t *testing.T, db *dbtest.DB, n int) {
	t.Helper()
	want := checksDone(t, db) + n
	dbtest.Eventually(t, func() bool { return checksDone(t, db) >= want }, "the alert checks never ran")
}

// TestAlertsOnAFailureGroup: 20 poison events of one cause make one
// group, and exactly one signed firing message reaches the alert webhook;
// it is not sent again while nothing changes, nor by a restarted process;
// discarding the group brings one resolved message.
func TestAlertsOnAFailureGroup(t *testing.T) {
	receiver := newAlertReceiver(t)
	alertSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("alert-secret-for-the-tests-32b!!"))
	env := map[string]string{"ADMIN_TOKEN": adminToken, "ALERT_WEBHOOK_URL": receiver.url + "/hook",
		"ALERT_WEBHOOK_SECRET": alertSecret, "ALERT_CHECK_INTERVAL": "1s"}
	s := start(t, env)
	const n = 20
	now := time.Now()
	for i := range n {
		// A subscription event without its object: the handler fails it
		// for good, the same way each time.
		body := []byte(fmt.Sprintf(`{"id":"evt_alert_%02d","object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`, i, now.Unix()))
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code, "%v", out)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed' AND event_id LIKE 'evt_alert_%'`) == n
	}, "the poison events never failed")
	t.Setenv("DATABASE_URL", s.db.URL)
	groups := failuresJSON(t)
	require.Len(t, groups, 1, "%+v", groups)
	require.Equal(t, n, groups[0].Count)

	dbtest.Eventually(t, func() bool { return len(receiver.of("failure_group")) > 0 }, "no firing message arrived")
	awaitChecks(t, s.db, 3)
	msgs := receiver.of("failure_group")
	require.Len(t, msgs, 1, "one message while nothing changes: %+v", msgs)
	fire := msgs[0]
	require.Equal(t, "firing", fire.Status)
	require.Equal(t, "failure_group:"+groups[0].ID, fire.Key)
	require.Contains(t, fire.Summary, fmt.Sprintf("%d failed event(s) from stripe in subscription.applyStripe", n))
	require.Contains(t, fire.Text, "[FIRING]")
	mac := hmac.New(sha256.New, []byte(alertSecret))
	mac.Write(fire.body)
	require.Equal(t, "sha256="+hex.EncodeToString(mac.Sum(nil)), fire.header.Get("X-Hookledger-Signature"))
	ts, err := strconv.ParseInt(fire.header.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	want, err := provider.SignStandard(alertSecret, fire.header.Get("webhook-id"), ts, fire.body)
	require.NoError(t, err)
	require.Equal(t, want, fire.header.Get("webhook-signature"), "signed as Standard Webhooks")

	// A restarted process reads the state the first one recorded.
	require.NoError(t, s.stop())
	s = startOn(t, s.db, env, config.RoleAll)
	awaitChecks(t, s.db, 3)
	require.Len(t, receiver.of("failure_group"), 1, "the restart sent nothing again")

	code, stdout, stderr := run("failures", "discard", groups[0].ID, "--reason", "poison: no subscription object", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("%d discarded", n))
	dbtest.Eventually(t, func() bool { return len(receiver.of("failure_group")) == 2 }, "no resolved message arrived")
	awaitChecks(t, s.db, 2)
	msgs = receiver.of("failure_group")
	require.Len(t, msgs, 2)
	require.Equal(t, "resolved", msgs[1].Status)
	require.Equal(t, fire.Key, msgs[1].Key)
	require.Contains(t, msgs[1].Text, "[RESOLVED]")
}

// TestAlertStateOutlivesRiverJobs: an alert's state is kept in
// alert_state, not in its messages' River jobs: with the notify job of a
// firing alert deleted, as River's job cleaner deletes finished jobs after
// their retention, the checks send nothing again; the alert resolves once.
func TestAlertStateOutlivesRiverJobs(t *testing.T) {
	t.Parallel()
	receiver := newAlertReceiver(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "ALERT_WEBHOOK_URL": receiver.url, "ALERT_CHECK_INTERVAL": "1s"})
	// A source refusing the signatures of twelve deliveries this minute.
	_, err := s.db.SQL.Exec(`INSERT INTO delivery_stat (minute, source, outcome, count)
		VALUES (date_trunc('minute', now()), 'stripe', 'invalid_signature', 12)`)
	require.NoError(t, err)
	const key = "signature_failures:stripe"
	notifyJobs := func(state string) int {
		return s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'alert_notify' AND args->>'key' = $1 AND state::text LIKE $2`, key, state)
	}
	dbtest.Eventually(t, func() bool { return notifyJobs("completed") == 1 }, "the firing message was never delivered")
	require.Len(t, receiver.of("signature_failures"), 1)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM alert_state
		WHERE key = $1 AND name = 'signature_failures' AND status = 'firing' AND level = 0
		AND summary LIKE 'source stripe refused 12 signature(s)%' AND fired_at <= now() AND resolved_at IS NULL`, key))

	_, err = s.db.SQL.Exec(`DELETE FROM river_job WHERE kind = 'alert_notify' AND state = 'completed'`)
	require.NoError(t, err)
	awaitChecks(t, s.db, 3)
	require.Zero(t, notifyJobs("%"), "no message queued again")
	require.Len(t, receiver.of("signature_failures"), 1, "nothing sent again")

	_, err = s.db.SQL.Exec(`DELETE FROM delivery_stat WHERE outcome = 'invalid_signature'`)
	require.NoError(t, err)
	dbtest.Eventually(t, func() bool { return notifyJobs("completed") == 1 }, "the resolved message was never delivered")
	awaitChecks(t, s.db, 2)
	msgs := receiver.of("signature_failures")
	require.Len(t, msgs, 2, "%+v", msgs)
	require.Equal(t, []string{"firing", "resolved"}, []string{msgs[0].Status, msgs[1].Status})
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM alert_state
		WHERE key = $1 AND status = 'resolved' AND resolved_at >= fired_at`, key))
}
