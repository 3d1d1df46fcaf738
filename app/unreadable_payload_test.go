package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestUnreadablePayloadCommands: a ledger holding one payload sealed under
// a key id no configured key has (a restored backup, a key removed too
// early) and one under the configured key but altered is still served and
// operated, as an operator runs hookledger: `serve` starts and counts the
// unknown key's row in hookledger_payloads_unreadable; `payloads check`
// lists both (event ids, key ids, counts; --json) and exits 3, and 0 once
// none is left; `erase --subject` of another subject exits 0, erases it
// and reports the two it skipped, and exits 1 naming the row when what is
// still readable of a skipped row quotes the subject; `payloads rekey`
// seals the rest and reports the two. Not parallel: the commands read the
// process environment.
func TestUnreadablePayloadCommands(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{5}, 32), bytes.Repeat([]byte{6}, 32)
	b64 := base64.StdEncoding.EncodeToString
	s := start(t, map[string]string{"PAYLOAD_KEYS": b64(k1)})
	for _, who := range []string{"a", "b", "c", "d"} {
		id := "evt_unread_" + who
		body := bytes.Replace(subEvent(id, "active", time.Now().Unix()), []byte(`"cus_e2e"`), []byte(`"cus_unread_`+who+`"`), 1)
		body = bytes.Replace(body, []byte(`"sub_e2e"`), []byte(`"sub_unread_`+who+`"`), 1)
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code, "%v", out)
		s.waitSettled(t, id)
	}
	require.NoError(t, s.stop())
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET payload = 'sealed:v1:deadbeef:' || substring(payload FROM 20) WHERE event_id = 'evt_unread_b'`)
	require.NoError(t, err)
	_, err = s.db.SQL.Exec(`UPDATE webhook_event SET payload = substring(payload FROM 1 FOR 30) || translate(substring(payload FROM 31), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'BCDEFGHIJKLMNOPQRSTUVWXYZA') WHERE event_id = 'evt_unread_c'`)
	require.NoError(t, err)

	t.Setenv("DATABASE_URL", s.db.URL)
	t.Setenv("PAYLOAD_KEYS", b64(k1))
	t.Setenv("LOG_LEVEL", "error")

	// serve starts, ready, and counts the unknown key's row.
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	t.Setenv("HTTP_ADDR", addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveOut, serveErr bytes.Buffer
	served := make(chan int, 1)
	go func() { served <- app.Main(ctx, []string{"serve"}, &serveOut, &serveErr) }()
	exited := false
	dbtest.Eventually(t, func() bool {
		select {
		case code := <-served:
			served <- code
			exited = true
			return true
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "serve answers /readyz")
	if exited {
		code := <-served
		t.Fatalf("serve exited %d: %s", code, serveErr.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), "hookledger_payloads_unreadable 1\n")
	cancel()
	require.Equal(t, 0, <-served, serveErr.String())

	// payloads check lists both, with their key ids and counts.
	code, stdout, stderr := run("payloads", "check")
	require.Equal(t, app.ExitDrift, code, stderr)
	require.Regexp(t, `stripe\s+evt_unread_b\s+deadbeef\s+unknown_key`, stdout)
	require.Regexp(t, `stripe\s+evt_unread_c\s+`+ledger.KeyID(k1)+`\s+corrupt`, stdout)
	require.Contains(t, stdout, "2 of 4 sealed payload(s) cannot be opened")
	require.Contains(t, stderr, "2 stored payload(s) no key opens")
	code, stdout, stderr = run("payloads", "check", "--json")
	require.Equal(t, app.ExitDrift, code, stderr)
	var check struct {
		Checked    int            `json:"checked"`
		Sealed     int            `json:"sealed"`
		ByKey      map[string]int `json:"unreadable_by_key"`
		Unreadable []struct {
			Namespace string `json:"namespace"`
			EventID   string `json:"event_id"`
			KeyID     string `json:"key_id"`
			Reason    string `json:"reason"`
		} `json:"unreadable"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &check), stdout)
	require.Equal(t, 4, check.Checked)
	require.Equal(t, 4, check.Sealed)
	require.Equal(t, map[string]int{"deadbeef": 1, ledger.KeyID(k1): 1}, check.ByKey)
	require.Len(t, check.Unreadable, 2)
	require.Equal(t, "evt_unread_b", check.Unreadable[0].EventID)
	require.Equal(t, "unknown_key", check.Unreadable[0].Reason)
	require.Equal(t, "evt_unread_c", check.Unreadable[1].EventID)
	require.Equal(t, "corrupt", check.Unreadable[1].Reason)

	// erase of another subject finishes, erases it, and says what it skipped.
	code, stdout, stderr = run("erase", "--subject", "cus_unread_a", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "erased 1 event payload(s)")
	require.Contains(t, stdout, "skipped 2 stored payload(s) no key opens")
	require.Contains(t, stderr, "not searched: stripe/evt_unread_b (key deadbeef, unknown_key)")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_unread_a' AND payload = $1`, ledger.ErasedPayload))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM subscription WHERE customer_id = 'cus_unread_a'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE customer_id = 'cus_unread_d'`), "others' rows stay")

	// A skipped row whose readable columns quote the subject fails erase.
	_, err = s.db.SQL.Exec(`UPDATE webhook_event SET last_error = 'handler subscription: cus_unread_b refused' WHERE event_id = 'evt_unread_b'`)
	require.NoError(t, err)
	code, _, stderr = run("erase", "--subject", "cus_unread_b", "--yes")
	require.Equal(t, app.ExitFailure, code, stderr)
	require.Contains(t, stderr, "stripe/evt_unread_b may hold the subject")

	// rekey under a new key seals the rest and reports the two.
	t.Setenv("PAYLOAD_KEYS", b64(k2)+","+b64(k1))
	code, stdout, stderr = run("payloads", "rekey")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "sealed 1 payload(s) with key "+ledger.KeyID(k2))
	require.Contains(t, stdout, "skipped 2 stored payload(s) no key opens")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE 'sealed:v1:'||$1||':%'`, ledger.KeyID(k2)))

	// Once the rows are gone, check finds nothing.
	_, err = s.db.SQL.Exec(`DELETE FROM webhook_event WHERE event_id IN ('evt_unread_b', 'evt_unread_c')`)
	require.NoError(t, err)
	code, stdout, stderr = run("payloads", "check")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "checked 1 stored payload(s), 1 sealed: every one opens"), stdout)
}
