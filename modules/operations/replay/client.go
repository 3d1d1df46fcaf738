package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// client calls a provider API with bounded retries: 429 waits for
// Retry-After, 5xx and network errors back off exponentially.
type client struct {
	http     *http.Client
	auth     func(*http.Request)
	attempts int
	maxWait  time.Duration
	base     time.Duration
	// sleep waits; tests shorten it.
	sleep func(ctx context.Context, d time.Duration) error
}

func newClient(hc *http.Client, auth func(*http.Request)) *client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &client{http: hc, auth: auth, attempts: 6, maxWait: time.Minute, base: retryBase, sleep: sleepCtx}
}

// APIError is an answer no retry will change.
type APIError struct {
	Status int
	Body   string
}

func (e *APIError) Error() string { return fmt.Sprintf("API answered %d: %s", e.Status, e.Body) }

// do sends a request built by newReq until it succeeds or the attempts run
// out, and returns the body and headers of a 2xx.
func (c *client) do(ctx context.Context, method, url string) ([]byte, http.Header, error) {
	var lastErr error
	backoff := c.base
	for attempt := 1; attempt <= c.attempts; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "hookledger-replay")
		c.auth(req)
		resp, err := c.http.Do(req)
		wait := backoff
		backoff = min(backoff*2, c.maxWait)
		if err != nil {
			lastErr = err
		} else {
			body, rerr := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
			resp.Body.Close()
			switch {
			case rerr != nil:
				lastErr = rerr
			case resp.StatusCode/100 == 2:
				return body, resp.Header, nil
			case resp.StatusCode == http.StatusTooManyRequests:
				lastErr = &APIError{resp.StatusCode, string(body)}
				if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
					wait = min(ra, c.maxWait)
				}
			case resp.StatusCode >= 500:
				lastErr = &APIError{resp.StatusCode, string(body)}
			default:
				return nil, nil, &APIError{resp.StatusCode, string(body)}
			}
		}
		if errors.Is(lastErr, context.Canceled) || errors.Is(lastErr, context.DeadlineExceeded) {
			return nil, nil, lastErr
		}
		if attempt < c.attempts {
			if err := c.sleep(ctx, wait); err != nil {
				return nil, nil, err
			}
		}
	}
	return nil, nil, fmt.Errorf("%s %s: giving up after %d attempts: %w", method, url, c.attempts, lastErr)
}

// retryBase is the first backoff after a transient failure.
var retryBase = 500 * time.Millisecond

// retryAfter reads Retry-After as seconds or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
