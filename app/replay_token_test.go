package app_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/operations/admin"
)

// replayToken is long enough to start without a warning.
const replayToken = "replay-token-for-throttle-tests"

// TestReplayTokenGuessesThrottled is a guesser at the replay token on the
// public webhook path of a server with GitHub, Stripe and Shopify sources,
// PAYLOAD_KEYS, and TRUSTED_PROXIES standing in for many client addresses:
// 300 wrong tokens from one address meet 429 with Retry-After once the
// address has spent its failures (20 answered 401 first, as wrong admin
// tokens are), while the right token from that same address is claimed
// before, during and after, another address's wrong token is still a 401,
// and a signed delivery without a token is never counted.
func TestReplayTokenGuessesThrottled(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{
		"REPLAY_TOKEN": replayToken, "TRUSTED_PROXIES": "127.0.0.1/32", "PAYLOAD_KEYS": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{4}, 32)),
		"GITHUB_WEBHOOK_SECRET": providerSecrets["github"], "SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
	})
	now := time.Now().Unix()
	from := func(addr string, h http.Header) http.Header {
		h.Set("X-Forwarded-For", addr)
		return h
	}
	const guesser = "198.51.100.7"

	code, out := s.post(t, "/webhooks/stripe", subEvent("evt_rt_before", "active", now), from(guesser, http.Header{"X-Replay-Token": {replayToken}}))
	require.Equal(t, http.StatusOK, code, "%v", out)

	var unauthorized, throttled int
	for i := range 300 {
		body := subEvent("evt_rt_guess_"+strconv.Itoa(i), "active", now)
		code, _ := s.post(t, "/webhooks/stripe", body, from(guesser, http.Header{"X-Replay-Token": {"guess-" + strconv.Itoa(i)}}))
		switch code {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			throttled++
		default:
			t.Fatalf("wrong token %d answered %d", i, code)
		}
		if i == 150 {
			code, out := s.post(t, "/webhooks/stripe", subEvent("evt_rt_during", "active", now), from(guesser, http.Header{"X-Replay-Token": {replayToken}}))
			require.Equal(t, http.StatusOK, code, "the right token amid the guesses: %v", out)
			require.Equal(t, "claimed", out["status"])
		}
	}
	require.GreaterOrEqual(t, unauthorized, admin.ThrottleBurst, "the first wrong tokens are 401")
	require.Less(t, unauthorized, admin.ThrottleBurst+10, "then one more every %s", admin.ThrottleEvery)
	require.Equal(t, 300-unauthorized, throttled, "the rest meet 429")

	req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/stripe", nil)
	require.NoError(t, err)
	req.Header.Set("X-Replay-Token", "one-more-guess")
	req.Header.Set("X-Forwarded-For", guesser)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, wait >= 1 && wait <= int(admin.ThrottleEvery/time.Second), "Retry-After %d", wait)

	code, out = s.post(t, "/webhooks/stripe", subEvent("evt_rt_after", "active", now), from(guesser, http.Header{"X-Replay-Token": {replayToken}}))
	require.Equal(t, http.StatusOK, code, "the right token after the guesses: %v", out)
	code, _ = s.post(t, "/webhooks/stripe", subEvent("evt_rt_other", "active", now), from("203.0.113.9", http.Header{"X-Replay-Token": {"a-first-guess"}}))
	require.Equal(t, http.StatusUnauthorized, code, "another address has its own count")
	signedBody := subEvent("evt_rt_signed", "active", now)
	code, out = s.post(t, "/webhooks/stripe", signedBody, from(guesser, signed(signedBody, time.Now())))
	require.Equal(t, http.StatusOK, code, "a signed delivery from the guessing address: %v", out)

	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "no guess wrote a row")
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed`))
}

// TestReplayTokenOnlyOnStripeAndPaddle: the replay token is honoured only
// on the providers whose replay re-posts events with it. `replay github`
// asks GitHub to redeliver, signed, so on a GitHub source the token is
// ignored (an environment source or a config-file source with its own
// token alike) and an unsigned push carrying the right token gets 401,
// while Stripe and Paddle still take it.
func TestReplayTokenOnlyOnStripeAndPaddle(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: github-org
    provider: github
    namespace: github-org
    secrets_env: ORG_SECRET
    replay_token_env: ORG_REPLAY_TOKEN
`), 0o600))
	s := start(t, map[string]string{
		"REPLAY_TOKEN": replayToken, "GITHUB_WEBHOOK_SECRET": providerSecrets["github"], "PADDLE_WEBHOOK_SECRET": providerSecrets["paddle"],
		"HOOKLEDGER_CONFIG": path, "ORG_SECRET": "github org secret", "ORG_REPLAY_TOKEN": "org-replay-token-0123456789",
	})
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	for source, token := range map[string]string{"github": replayToken, "github-org": "org-replay-token-0123456789"} {
		h := http.Header{"X-Replay-Token": {token}, "X-Github-Delivery": {"d-" + source}, "X-Github-Event": {"push"}}
		code, out := s.post(t, "/webhooks/"+source, push, h)
		require.Equal(t, http.StatusUnauthorized, code, "%s: an unsigned push with the right token: %v", source, out)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))

	h, err := provider.GitHub.Sign(providerSecrets["github"], provider.Delivery{ID: "d-signed", Type: "push", Body: push})
	require.NoError(t, err)
	h.Set("X-Replay-Token", replayToken)
	code, out := s.post(t, "/webhooks/github", push, h)
	require.Equal(t, http.StatusOK, code, "a signed push is verified as usual: %v", out)

	paddle, err := os.ReadFile("../testdata/providers/paddle/subscription.created.evt_01hv9771tccgcm4y810d8zbceh.json")
	require.NoError(t, err)
	code, out = s.post(t, "/webhooks/paddle", paddle, http.Header{"X-Replay-Token": {replayToken}})
	require.Equal(t, http.StatusOK, code, "%v", out)
	code, out = s.post(t, "/webhooks/stripe", subEvent("evt_rt_stripe", "active", time.Now().Unix()), http.Header{"X-Replay-Token": {replayToken}})
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE source = 'github' AND NOT replayed`))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed AND source IN ('paddle', 'stripe')`))
}
