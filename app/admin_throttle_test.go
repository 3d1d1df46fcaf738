package app_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRightAdminTokenNeverThrottled is the lock-out: wrong tokens from
// 20,000 IPv6 /64s (more than any table of clients the throttle could
// keep) are refused, and then the right token is answered 200 on the
// admin API, the console and River UI, five times out of five, from a
// /64 never seen, from one that guessed, and from one that spent its
// failures; wrong tokens from one address still meet a 429.
func TestRightAdminTokenNeverThrottled(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "TRUSTED_PROXIES": "127.0.0.1/32,::1/128"})
	client := &http.Client{
		Transport:     &http.Transport{MaxIdleConnsPerHost: 8},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	get := func(path, from, token string) (int, error) {
		req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", from)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}
	network := func(i int) string { return fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff) }

	const guessers, workers = 20000, 8
	codes := make([]map[int]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[w] = map[int]int{}
			for i := w; i < guessers; i += workers {
				code, err := get("/admin/stats", network(i), fmt.Sprintf("guess-%d", i))
				if err != nil {
					errs[w] = err
					return
				}
				codes[w][code]++
			}
		}()
	}
	wg.Wait()
	refused := 0
	for w := range workers {
		require.NoError(t, errs[w])
		refused += codes[w][http.StatusUnauthorized] + codes[w][http.StatusTooManyRequests]
	}
	require.Equal(t, guessers, refused, "every wrong token refused")

	const spent = "203.0.113.9"
	for i := range 40 {
		code, err := get("/admin/stats", spent, fmt.Sprintf("guess-%d", i))
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, code)
	}
	code, err := get("/admin/stats", spent, "guess-41")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, code, "40 wrong tokens from one address meet a 429")

	for _, from := range []string{"2001:db8:ffff:1::1", network(7), spent} {
		for _, path := range []string{"/admin/stats", "/console/", "/riverui/"} {
			for i := range 5 {
				code, err := get(path, from, adminToken)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, code, "%s from %s, try %d", path, from, i+1)
			}
		}
	}
}
