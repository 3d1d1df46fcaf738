package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// partnerSigningKey is the sender's ed25519 seed; hookledger is given only
// its public key.
const partnerSigningKey = "whsk_" + "cGFydG5lci1zaWduaW5nLWtleS1zZWVkLTMyLWJ5dGU="

// TestStandardPublicKeyWithoutPrefixStopsStartup: a Standard Webhooks
// public key given without whpk_ in STANDARD_WEBHOOK_PUBLIC_KEY used to
// become a v1 HMAC secret that anyone knowing the public key could sign
// with; `hookledger serve` now refuses to start and names the variable.
// Not parallel: serve reads the process environment.
func TestStandardPublicKeyWithoutPrefixStopsStartup(t *testing.T) {
	pub, err := provider.StandardPublicKeyOf(partnerSigningKey)
	require.NoError(t, err)
	bare := strings.TrimPrefix(pub, provider.StandardPublicKeyPrefix)

	// The harness's configuration step refuses it...
	_, err = config.FromEnv(func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "STANDARD_WEBHOOK_PUBLIC_KEY": bare}[k]
	})
	require.ErrorContains(t, err, "STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is not a Standard Webhooks public key")

	// ...and so does serve, before it opens the database.
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("STANDARD_WEBHOOK_PUBLIC_KEY", bare)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	code := app.Main(ctx, []string{"serve"}, &stdout, &stderr)
	require.Equal(t, app.ExitFailure, code, stderr.String())
	require.Contains(t, stderr.String(), "configuration:")
	require.Contains(t, stderr.String(), "STANDARD_WEBHOOK_PUBLIC_KEY: entry 0 (counting from 0) is not a Standard Webhooks public key")
	require.Contains(t, stderr.String(), "write it as whpk_ followed by the key")
}

// TestStandardPublicKeyNeverSignsV1: with a correct whpk_ key configured,
// v1 HMAC signatures made with the public key's text (with or without
// its prefix, or its bytes as a whsec_ secret) are refused with 401 and
// write nothing: the forged usage event of the security review never
// reaches usage_total. A genuine v1a delivery is still claimed.
func TestStandardPublicKeyNeverSignsV1(t *testing.T) {
	t.Parallel()
	pub, err := provider.StandardPublicKeyOf(partnerSigningKey)
	require.NoError(t, err)
	bare := strings.TrimPrefix(pub, provider.StandardPublicKeyPrefix)
	s := start(t, map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": pub})

	body := []byte(`{"type":"usage.recorded","timestamp":"` + time.Now().UTC().Format(time.RFC3339) + `","data":{"customer_id":"cus_forged","metric":"api_calls","quantity":1000000}}`)
	now := time.Now().Unix()
	v1 := func(key []byte, id string) http.Header {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + strconv.FormatInt(now, 10) + "." + string(body)))
		return http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(now, 10)},
			"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	}
	raw, err := base64.StdEncoding.DecodeString(bare)
	require.NoError(t, err)
	for name, key := range map[string][]byte{
		"whpk_ text":                   []byte(pub),
		"bare text":                    []byte(bare),
		"key bytes (bare as a whsec_)": raw,
	} {
		code, out := s.post(t, "/webhooks/standard", body, v1(key, "msg_forged_"+strings.ReplaceAll(name, " ", "_")))
		require.Equal(t, http.StatusUnauthorized, code, name)
		require.Equal(t, "invalid or missing signature", out["error"], name)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM usage_total`))

	h, err := provider.Standard.Sign(partnerSigningKey, provider.Delivery{ID: "msg_genuine", Type: "usage.recorded", At: time.Now(), Body: body})
	require.NoError(t, err)
	code, out := s.post(t, "/webhooks/standard", body, h)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "claimed", out["status"])
}

// TestStandardSignatureListCappedOverHTTP: a webhook-signature header
// with more than provider.MaxStandardSignatures v1a entries is a 401 even
// with the genuine signature among them; at the cap it is claimed.
func TestStandardSignatureListCappedOverHTTP(t *testing.T) {
	t.Parallel()
	pub, err := provider.StandardPublicKeyOf(partnerSigningKey)
	require.NoError(t, err)
	s := start(t, map[string]string{"STANDARD_WEBHOOK_PUBLIC_KEY": pub, "MAX_BODY_BYTES": strconv.Itoa(1 << 20)})
	body := []byte(`{"type":"contact.created","timestamp":"` + time.Now().UTC().Format(time.RFC3339) + `","pad":"` + strings.Repeat("a", 1<<19) + `"}`)
	send := func(id string, junk int) (int, map[string]any) {
		h, err := provider.Standard.Sign(partnerSigningKey, provider.Delivery{ID: id, Type: "contact.created", At: time.Now(), Body: body})
		require.NoError(t, err)
		entries := make([]string, 0, junk+1)
		for i := range junk {
			sig := make([]byte, 64)
			sig[0], sig[1] = byte(i), byte(i>>8)
			entries = append(entries, "v1a,"+base64.StdEncoding.EncodeToString(sig))
		}
		h.Set("Webhook-Signature", strings.Join(append(entries, h.Get("Webhook-Signature")), " "))
		return s.post(t, "/webhooks/standard", body, h)
	}
	code, _ := send("msg_list_680", 680)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = send("msg_list_11", provider.MaxStandardSignatures)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))

	code, out := send("msg_list_10", provider.MaxStandardSignatures-1)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "claimed", out["status"])
}
