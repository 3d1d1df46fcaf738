package provider

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vector is one entry of testdata/providers/signatures.json.
type vector struct {
	Provider    string            `json:"provider"`
	Description string            `json:"description"`
	Secret      string            `json:"secret"`
	Headers     map[string]string `json:"headers"`
	BodyBase64  string            `json:"body_base64"`
	NowUnix     *int64            `json:"now_unix"`
	Expect      string            `json:"expect"`
	Tolerance   *float64          `json:"tolerance_seconds"`
}

// vectorProvider maps a vector's provider name to hookledger's.
var vectorProvider = map[string]string{"standard-webhooks": "standard", "svix": "standard"}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/providers/signatures.json")
	require.NoError(t, err)
	var all []vector
	require.NoError(t, json.Unmarshal(raw, &all))
	require.Len(t, all, 67)
	for i, v := range all {
		if name, ok := vectorProvider[v.Provider]; ok {
			all[i].Provider = name
		}
	}
	return all
}

// TestVectors runs every official and derived vector through its provider.
func TestVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadVectors(t) {
		t.Run(v.Provider+"/"+v.Description, func(t *testing.T) {
			p, ok := Lookup(v.Provider)
			require.True(t, ok, v.Provider)
			body, err := base64.StdEncoding.DecodeString(v.BodyBase64)
			require.NoError(t, err)
			h := http.Header{}
			for k, val := range v.Headers {
				h.Set(k, val)
			}
			now := time.Now()
			if v.NowUnix != nil {
				now = time.Unix(*v.NowUnix, 0)
			}
			tol := time.Duration(-1)
			if v.Tolerance != nil {
				tol = time.Duration(*v.Tolerance * float64(time.Second))
			}
			_, err = p.Verify(h, body, [][]byte{[]byte(v.Secret)}, now, tol)
			if v.Expect == "valid" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrSignature)
			}
		})
	}
}

func TestStripeVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"customer.subscription.created","created":1700000000}`)
	now := time.Unix(1700000100, 0)
	sign := func(secret string, ts int64) http.Header {
		return http.Header{"Stripe-Signature": {SignStripe(secret, ts, body)}}
	}
	secrets := [][]byte{[]byte("whsec_old"), []byte("whsec_new")}

	v, err := Stripe.Verify(sign("whsec_old", 1700000090), body, secrets, now, -1)
	require.NoError(t, err)
	require.Equal(t, 0, v.SecretIndex)
	require.Equal(t, int64(1700000090), v.SignedAt.Unix())

	v, err = Stripe.Verify(sign("whsec_new", 1700000090), body, secrets, now, -1)
	require.NoError(t, err, "rotation: the second secret matches")
	require.Equal(t, 1, v.SecretIndex)

	_, err = Stripe.Verify(sign("whsec_other", 1700000090), body, secrets, now, -1)
	require.ErrorIs(t, err, ErrSignature, "wrong secret")

	tampered := append([]byte{}, body...)
	tampered[10] = 'X'
	_, err = Stripe.Verify(sign("whsec_old", 1700000090), tampered, secrets, now, -1)
	require.ErrorIs(t, err, ErrSignature, "tampered body")

	_, err = Stripe.Verify(sign("whsec_old", 1700000100-301), body, secrets, now, -1)
	require.ErrorContains(t, err, "older than", "stale")

	_, err = Stripe.Verify(sign("whsec_old", 1700000100+3600), body, secrets, now, -1)
	require.NoError(t, err, "future timestamps pass, as in Stripe's SDKs")

	several := http.Header{"Stripe-Signature": {SignStripe("whsec_x", 1700000090, body) + ",v1=" +
		sign("whsec_new", 1700000090).Get("Stripe-Signature")[len("t=1700000090,v1="):]}}
	v, err = Stripe.Verify(several, body, secrets, now, -1)
	require.NoError(t, err, "any of several v1 entries")
	require.Equal(t, 1, v.SecretIndex)

	for _, bad := range []string{"", "garbage", "t=abc,v1=00", "v1=" + "00", "t=1700000090", "t=1700000090,v0=abcd", "t=1700000090,v1=zz"} {
		_, err := Stripe.Verify(http.Header{"Stripe-Signature": {bad}}, body, secrets, now, -1)
		require.ErrorIs(t, err, ErrSignature, "header %q", bad)
	}
	_, err = Stripe.Verify(sign("whsec_old", 1700000090), body, nil, now, -1)
	require.ErrorIs(t, err, ErrSignature, "no secret never means accept")
}

func TestParseStripe(t *testing.T) {
	t.Parallel()
	ev, err := Stripe.Parse(nil, []byte(`{"id":"evt_1","type":"invoice.paid","created":1700000000}`), nil)
	require.NoError(t, err)
	require.Equal(t, Parsed{ID: "evt_1", Type: "invoice.paid", OccurredAt: time.Unix(1700000000, 0)}, ev)

	for _, bad := range []string{`not json`, `{"type":"x"}`, `{"id":"evt_1"}`, `{"id":"evt_1","type":"x","s":"\u0000"}`, "{\"id\":\"evt_1\",\"type\":\"x\"} trailing"} {
		_, err := Stripe.Parse(nil, []byte(bad), nil)
		require.ErrorIs(t, err, ErrPayload, bad)
	}
	_, err = Stripe.Parse(nil, []byte(`{"id":"evt_1","type":"x","s":"\\u0000"}`), nil)
	require.NoError(t, err, "an escaped backslash before u0000 is plain text")
}
