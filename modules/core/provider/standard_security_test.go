package provider

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	testSigningKey  = "whsk_" + "bmV3LXNpZ25pbmcta2V5LXNlZWQtMzItYnl0ZXMhISE="
	testSigningKey2 = "whsk_" + "b2xkLXNpZ25pbmcta2V5LXNlZWQtMzItYnl0ZXMhISE="
)

var standardNow = time.Unix(1_800_000_000, 0)

// standardHeaders are a delivery's headers with sig as webhook-signature.
func standardHeaders(id, sig string) http.Header {
	return http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(standardNow.Unix(), 10)}, "Webhook-Signature": {sig}}
}

// v1With is a v1 entry whose HMAC key is key, raw bytes.
func v1With(key []byte, id string, body []byte) string {
	signed := id + "." + strconv.FormatInt(standardNow.Unix(), 10) + "." + string(body)
	return "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(key, []byte(signed)))
}

func publicKeyOf(t *testing.T, signingKey string) string {
	t.Helper()
	pub, err := StandardPublicKeyOf(signingKey)
	require.NoError(t, err)
	return pub
}

// TestStandardPublicKeyIsNeverAnHMACKey: whoever knows a configured
// public key signs v1 entries with it in every spelling (the base64 key
// as a whsec_ secret, the whpk_ text, the bare text): none is accepted,
// not even when the same key is also configured without its prefix,
// which configuration refuses and verification ignores.
func TestStandardPublicKeyIsNeverAnHMACKey(t *testing.T) {
	t.Parallel()
	pub := publicKeyOf(t, testSigningKey)
	bare := strings.TrimPrefix(pub, StandardPublicKeyPrefix)
	raw, err := base64.StdEncoding.DecodeString(bare)
	require.NoError(t, err)
	body := []byte(`{"type":"usage.recorded","timestamp":"2027-01-15T08:00:00Z","data":{"quantity":1000000}}`)

	forged := map[string]string{}
	for name, key := range map[string][]byte{"key bytes": raw, "whpk_ text": []byte(pub), "bare text": []byte(bare)} {
		forged[name] = v1With(key, "msg_forged", body)
	}
	viaSecret, err := SignStandard("whsec_"+bare, "msg_forged", standardNow.Unix(), body)
	require.NoError(t, err)
	forged["whsec_ secret"] = viaSecret

	for _, keys := range [][]string{
		{pub},
		{bare, pub},            // the bare key beside the real one: its HMAC key is a public key
		{"whsec_" + bare, pub}, // the same, as a whsec_ secret
		{pub, bare},
	} {
		secrets := make([][]byte, len(keys))
		for i, k := range keys {
			secrets[i] = []byte(k)
		}
		for name, sig := range forged {
			_, err := Standard.Verify(standardHeaders("msg_forged", sig), body, secrets, standardNow, -1)
			require.ErrorIs(t, err, ErrSignature, "%s, keys %d", name, len(keys))
			require.Equal(t, ReasonMismatch, ReasonOf(err), name)
		}
	}

	// Genuine signatures still verify, each with its own key's position.
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secrets := [][]byte{[]byte(secret), []byte(pub)}
	v1, err := SignStandard(secret, "msg_1", standardNow.Unix(), body)
	require.NoError(t, err)
	v, err := Standard.Verify(standardHeaders("msg_1", v1), body, secrets, standardNow, -1)
	require.NoError(t, err)
	require.Equal(t, 0, v.SecretIndex)
	v1a, err := SignStandard(testSigningKey, "msg_2", standardNow.Unix(), body)
	require.NoError(t, err)
	v, err = Standard.Verify(standardHeaders("msg_2", v1a), body, secrets, standardNow, -1)
	require.NoError(t, err)
	require.Equal(t, 1, v.SecretIndex)

	// A v1a signature never matches a v1 secret, nor a v1 one a public key.
	_, err = Standard.Verify(standardHeaders("msg_2", v1a), body, secrets[:1], standardNow, -1)
	require.Equal(t, ReasonMismatch, ReasonOf(err))
	_, err = Standard.Verify(standardHeaders("msg_1", v1), body, secrets[1:], standardNow, -1)
	require.Equal(t, ReasonMismatch, ReasonOf(err))
}

// junkV1a is n distinct well-formed v1a entries that verify under no key.
func junkV1a(n int) []string {
	out := make([]string, n)
	for i := range out {
		sig := bytes.Repeat([]byte{byte(i + 1)}, ed25519.SignatureSize)
		out[i] = "v1a," + base64.StdEncoding.EncodeToString(sig)
	}
	return out
}

// junkV1 is n distinct well-formed v1 entries that match no secret.
func junkV1(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "v1," + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{byte(i + 1)}, 32))
	}
	return out
}

// TestStandardSignatureListIsCapped: a webhook-signature header with more
// than MaxStandardSignatures entries of one scheme is refused (401,
// malformed) even when a genuine signature is among them; up to the cap
// of each scheme, and any number of other schemes' entries, still verify.
func TestStandardSignatureListIsCapped(t *testing.T) {
	t.Parallel()
	pub := publicKeyOf(t, testSigningKey)
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secrets := [][]byte{[]byte(secret), []byte(pub)}
	body := []byte(`{"type":"contact.created","timestamp":"2027-01-15T08:00:00Z"}`)
	v1a, err := SignStandard(testSigningKey, "msg_cap", standardNow.Unix(), body)
	require.NoError(t, err)
	v1, err := SignStandard(secret, "msg_cap", standardNow.Unix(), body)
	require.NoError(t, err)
	verify := func(entries ...[]string) error {
		var all []string
		for _, e := range entries {
			all = append(all, e...)
		}
		_, err := Standard.Verify(standardHeaders("msg_cap", strings.Join(all, " ")), body, secrets, standardNow, -1)
		return err
	}

	for name, entries := range map[string][][]string{
		"v1a":                       {junkV1a(MaxStandardSignatures), {v1a}},
		"v1":                        {junkV1(MaxStandardSignatures), {v1}},
		"the hostile 680":           {junkV1a(680), {v1a}},
		"undecodable entries count": {{v1a}, strings.Fields(strings.Repeat("v1a,!!! ", MaxStandardSignatures))},
	} {
		err := verify(entries...)
		require.ErrorIs(t, err, ErrSignature, name)
		require.Equal(t, ReasonMalformed, ReasonOf(err), name)
		require.Contains(t, err.Error(), "more than 10", name)
	}

	require.NoError(t, verify(junkV1a(MaxStandardSignatures-1), []string{v1a}))
	require.NoError(t, verify(junkV1(MaxStandardSignatures-1), []string{v1}))
	require.NoError(t, verify(junkV1(MaxStandardSignatures), junkV1a(MaxStandardSignatures-1), []string{v1a}), "the cap is per scheme")
	require.NoError(t, verify(strings.Fields(strings.Repeat("v2,abc ", 50)), []string{v1a}), "other schemes are skipped, not counted")
	require.NoError(t, verify(junkV1a(1), junkV1a(1), junkV1a(1), []string{v1a}), "duplicates count towards the cap but are checked once")
}

// TestStandardSignatureListCostIsBounded counts ed25519 verifications: a
// header repeating one entry is checked once per public key, a capped
// list at most MaxStandardSignatures times per key, a list over the cap
// not at all, and every verification gets the one signed message built
// for the delivery. Not parallel: it replaces ed25519Verify.
func TestStandardSignatureListCostIsBounded(t *testing.T) {
	var (
		calls int
		msgs  = map[*byte]bool{}
	)
	ed25519Verify = func(pub ed25519.PublicKey, msg, sig []byte) bool {
		calls++
		msgs[&msg[0]] = true
		return ed25519.Verify(pub, msg, sig)
	}
	t.Cleanup(func() { ed25519Verify = ed25519.Verify })

	secrets := [][]byte{[]byte(publicKeyOf(t, testSigningKey2)), []byte(publicKeyOf(t, testSigningKey))}
	body := bytes.Repeat([]byte("a"), 1<<20)
	run := func(entries []string) error {
		calls, msgs = 0, map[*byte]bool{}
		_, err := Standard.Verify(standardHeaders("msg_cost", strings.Join(entries, " ")), body, secrets, standardNow, -1)
		return err
	}

	junk := junkV1a(1)[0]
	require.Equal(t, ReasonMismatch, ReasonOf(run(strings.Fields(strings.Repeat(junk+" ", MaxStandardSignatures)))))
	require.Equal(t, 2, calls, "ten copies of one entry: one verification per public key")

	require.Equal(t, ReasonMismatch, ReasonOf(run(junkV1a(MaxStandardSignatures))))
	require.Equal(t, 2*MaxStandardSignatures, calls)
	require.Len(t, msgs, 1, "the signed message is built once per delivery")

	require.Equal(t, ReasonMalformed, ReasonOf(run(junkV1a(680))))
	require.Zero(t, calls, "a list over the cap costs no cryptography")

	v1a, err := SignStandard(testSigningKey, "msg_cost", standardNow.Unix(), body)
	require.NoError(t, err)
	require.NoError(t, run(append(junkV1a(3), v1a, v1a)))
	require.Equal(t, 4+4, calls, "four distinct entries against the first key, then the second key's match comes fourth")
}
