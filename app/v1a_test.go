package app_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// v1aVector is one of testdata/providers/signatures_v1a.json: signed with
// pyca/cryptography; signing_key, when given, is the whsk_ seed it used.
type v1aVector struct {
	vector
	SigningKey string `json:"signing_key"`
}

func loadV1aVectors(t *testing.T) []v1aVector {
	t.Helper()
	raw, err := os.ReadFile("../testdata/providers/signatures_v1a.json")
	require.NoError(t, err)
	var vs []v1aVector
	require.NoError(t, json.Unmarshal(raw, &vs))
	require.NotEmpty(t, vs)
	return vs
}

// TestV1aVectorsThroughVerify runs the v1a vectors through `hookledger
// verify`, with the public key as --secret and as --public-key, and checks
// that Go's crypto/ed25519 makes, from each vector's seed, the very
// signature the independent implementation made.
func TestV1aVectorsThroughVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, v := range loadV1aVectors(t) {
		t.Run(v.Description, func(t *testing.T) {
			body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
			require.NoError(t, err)
			checkVector(t, v.vector, body, filepath.Join(dir, fmt.Sprintf("v1a-%d", i)))
			if v.SigningKey != "" {
				ts, err := strconv.ParseInt(v.Headers["webhook-timestamp"], 10, 64)
				require.NoError(t, err)
				got, err := provider.SignStandard(v.SigningKey, v.Headers["webhook-id"], ts, body)
				require.NoError(t, err)
				require.Contains(t, strings.Fields(v.Headers["webhook-signature"]), got, "crypto/ed25519 reproduces the signature")
				pub, err := provider.StandardPublicKeyOf(v.SigningKey)
				require.NoError(t, err)
				require.Equal(t, v.Secret, pub)
			}
			if strings.HasPrefix(v.Secret, "whpk_") {
				args := []string{"verify", "--provider", "standard", "--public-key", v.Secret, "--body-file", filepath.Join(dir, fmt.Sprintf("v1a-%d", i)), "--at", fmt.Sprint(*v.NowUnix)}
				for k, val := range v.Headers {
					args = append(args, "--header", k+": "+val)
				}
				code, _, stderr := run(args...)
				if v.Expect == "valid" {
					require.Equal(t, 0, code, stderr)
				} else {
					require.Equal(t, 1, code)
				}
			}
		})
	}
	code, _, stderr := run("verify", "--provider", "standard", "--secret", "whsk_c2VlZHNlZWRzZWVkc2VlZHNlZWRzZWVkc2VlZHNlZWQ=", "--body-file", filepath.Join(dir, "v1a-0"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "receiver needs only its public key")
}

// TestV1aOverHTTP serves a standard source enabled by public keys alone
// (two, for rotation): a v1a delivery is claimed with the matching key's
// index, a v1-only or tampered one is refused with 401 and writes nothing.
func TestV1aOverHTTP(t *testing.T) {
	t.Parallel()
	const oldKey, newKey = "whsk_" + "b2xkLXNpZ25pbmcta2V5LXNlZWQtMzItYnl0ZXMhISE=", "whsk_" + "bmV3LXNpZ25pbmcta2V5LXNlZWQtMzItYnl0ZXMhISE="
	oldPub, err := provider.StandardPublicKeyOf(oldKey)
	require.NoError(t, err)
	newPub, err := provider.StandardPublicKeyOf(newKey)
	require.NoError(t, err)
	s := start(t, map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": oldPub + "," + newPub})
	body := []byte(`{"type":"contact.created","timestamp":"2026-03-01T10:00:00Z","data":{"id":"c_1"}}`)
	send := func(key, id string, b []byte) int {
		h, err := provider.Standard.Sign(key, provider.Delivery{ID: id, Type: "contact.created", At: time.Now(), Body: body})
		require.NoError(t, err)
		code, _ := s.post(t, "/webhooks/standard", b, h)
		return code
	}
	require.Equal(t, http.StatusOK, send(newKey, "msg_v1a_1", body))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'msg_v1a_1' AND secret_index = 1`))
	require.Equal(t, http.StatusUnauthorized, send(newKey, "msg_v1a_2", append([]byte(" "), body...)))
	require.Equal(t, http.StatusUnauthorized, send(providerSecrets["standard"], "msg_v1a_3", body), "a v1 signature, and no v1 secret")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}
