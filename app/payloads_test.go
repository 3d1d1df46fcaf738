package app_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestPayloadKeys: with PAYLOAD_KEYS no stored payload holds a plaintext
// field, while the admin API, the console and the CLI show the payload and
// a forced re-apply applies it; after a rotation (a new first key, the old
// one kept) rekey puts every payload under the new key, which then opens
// them alone; serve refuses a key that cannot open them, naming the
// problem.
func TestPayloadKeys(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	keys := func(ks ...[]byte) string {
		var out []string
		for _, k := range ks {
			out = append(out, base64.StdEncoding.EncodeToString(k))
		}
		return strings.Join(out, ",")
	}
	env := map[string]string{"PAYLOAD_KEYS": keys(k1), "ADMIN_TOKEN": adminToken}
	s := start(t, env)
	deliver := func(s *server, id string) {
		body := bytes.Replace(subEvent(id, "active", time.Now().Unix()), []byte(`"sub_e2e"`), []byte(`"sub_`+id+`"`), 1)
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code, "%v", out)
		s.waitSettled(t, id)
	}
	deliver(s, "evt_sealed_1")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE 'sealed:v1:'||$1||':%'
		AND strpos(payload, 'evt_sealed_1') = 0 AND strpos(payload, 'cus_e2e') = 0`, ledger.KeyID(k1)))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE status = 'active'`), "applied")

	code, out, _ := s.admin(t, http.MethodGet, "/admin/events/evt_sealed_1", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	raw, err := json.Marshal(out["event"])
	require.NoError(t, err)
	require.Contains(t, string(raw), "cus_e2e", "the admin API shows the payload")
	code, page, _ := s.page(t, "/console/event?namespace=stripe&id=evt_sealed_1", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "cus_e2e", "the console shows the payload")
	t.Setenv("DATABASE_URL", s.db.URL)
	t.Setenv("PAYLOAD_KEYS", keys(k1))
	code, stdout, stderr := run("events", "show", "evt_sealed_1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "cus_e2e", "the CLI shows the payload")

	code, _, stderr = run("events", "requeue", "--force", "evt_sealed_1")
	require.Equal(t, 0, code, stderr)
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_sealed_1' AND status = 'settled' AND attempts = 2`) == 1
	}, "the forced re-apply opened the sealed payload")

	// Rotation: k2 first, k1 kept to open.
	require.NoError(t, s.stop())
	env["PAYLOAD_KEYS"] = keys(k2, k1)
	s = startOn(t, s.db, env, config.RoleAll)
	deliver(s, "evt_sealed_2")
	require.NoError(t, s.stop())
	t.Setenv("PAYLOAD_KEYS", keys(k2, k1))
	code, stdout, stderr = run("payloads", "rekey")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "sealed 1 payload(s) with key "+ledger.KeyID(k2))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE 'sealed:v1:'||$1||':%'`, ledger.KeyID(k2)))

	// k2 alone opens everything; k1 alone, a wrong key or none is refused.
	t.Setenv("PAYLOAD_KEYS", keys(k2))
	code, stdout, stderr = run("events", "show", "evt_sealed_1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "cus_e2e")
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	for _, wrong := range []string{keys(k1), keys(bytes.Repeat([]byte{3}, 32)), ""} {
		t.Setenv("PAYLOAD_KEYS", wrong)
		code, _, stderr = run("serve")
		require.Equal(t, 1, code)
		require.Regexp(t, "PAYLOAD_KEYS (cannot open|is not set)", stderr)
	}
	t.Setenv("PAYLOAD_KEYS", "not-base64")
	code, _, stderr = run("events", "list")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "PAYLOAD_KEYS: key 1 is not 32 bytes")
	require.NotContains(t, stderr, "not-base64", "a key is never printed")
}
