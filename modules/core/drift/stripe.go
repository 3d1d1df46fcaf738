package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// stripeAttempts bounds the calls of one Stripe request: the network, 429
// and 5xx are retried with a backoff from retryBase, doubling to 8 s.
const stripeAttempts = 5

// retryBase is the first backoff after a failure worth retrying.
var retryBase = 500 * time.Millisecond

// StripeList pages a Stripe list endpoint (path, such as /v1/subscriptions,
// with query q), 100 objects a page, newest first, from created since when
// it is not zero, and hands each page to fn with the second Stripe
// answered it, by Stripe's clock (StripeGet).
func StripeList(ctx context.Context, api provider.StripeAPI, path string, q url.Values, since time.Time, fn func(at time.Time, data []json.RawMessage) error) error {
	q = cloneValues(q)
	q.Set("limit", "100")
	if !since.IsZero() {
		q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	}
	for {
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		at, err := StripeGet(ctx, api, path+"?"+q.Encode(), &page)
		if err != nil {
			return fmt.Errorf("list %s: %w", path, err)
		}
		if err := fn(at, page.Data); err != nil {
			return err
		}
		if !page.HasMore || len(page.Data) == 0 {
			return nil
		}
		var last struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(page.Data[len(page.Data)-1], &last); err != nil || last.ID == "" {
			return fmt.Errorf("list %s: the page's last object has no id", path)
		}
		q.Set("starting_after", last.ID)
	}
}

// StripeGet reads path (with its query) into v, retrying the network, 429
// and 5xx, and returns when Stripe answered, by Stripe's clock: the
// answer's Date header (this machine's clock only when Stripe sent none).
// A 404 wraps ErrGone (a *GoneError with that time); another answer no
// retry changes (401, 403, 400) is returned as is.
func StripeGet(ctx context.Context, api provider.StripeAPI, path string, v any) (time.Time, error) {
	clock := &dateClock{}
	api.HTTP = clock.client(api.HTTP)
	backoff := retryBase
	for attempt := 1; ; attempt++ {
		clock.reset()
		err := api.Get(ctx, path, "", v)
		at := clock.at()
		var refused *provider.APIRefusal
		switch {
		case err == nil:
			return at, nil
		case errors.As(err, &refused) && refused.Code == http.StatusNotFound:
			return at, &GoneError{At: at, Err: err}
		case errors.As(err, &refused), ctx.Err() != nil, attempt == stripeAttempts:
			return at, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return at, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 8*time.Second)
	}
}

// GoneError is ErrGone with when the provider said so, by its clock.
type GoneError struct {
	At  time.Time
	Err error
}

func (e *GoneError) Error() string { return ErrGone.Error() + ": " + e.Err.Error() }

// Is makes a GoneError match ErrGone.
func (e *GoneError) Is(target error) bool { return target == ErrGone }

func (e *GoneError) Unwrap() error { return e.Err }

// dateClock reads the Date header of the answers its client gets.
type dateClock struct {
	mu   sync.Mutex
	date time.Time
	base http.RoundTripper
}

// client is hc (http.DefaultClient when nil) with its answers' Date read.
func (c *dateClock) client(hc *http.Client) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	out := *hc
	c.base = hc.Transport
	if c.base == nil {
		c.base = http.DefaultTransport
	}
	out.Transport = c
	return &out
}

// RoundTrip passes the request on and keeps the answer's Date.
func (c *dateClock) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			c.mu.Lock()
			c.date = d
			c.mu.Unlock()
		}
	}
	return resp, err
}

func (c *dateClock) reset() {
	c.mu.Lock()
	c.date = time.Time{}
	c.mu.Unlock()
}

// at is the last answer's Date, else this machine's clock, to the second.
func (c *dateClock) at() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.date.IsZero() {
		return time.Unix(time.Now().Unix(), 0)
	}
	return time.Unix(c.date.Unix(), 0)
}

// StripeEvent is a repair as a Stripe snapshot event: what a delivery of
// the change would have carried, created when Stripe answered, by
// Stripe's clock. livemode
// is the object's.
func StripeEvent(id, typ string, created time.Time, obj json.RawMessage) ([]byte, error) {
	var mode struct {
		Livemode bool `json:"livemode"`
	}
	if err := json.Unmarshal(obj, &mode); err != nil {
		return nil, fmt.Errorf("event %s: the object is not JSON: %w", id, err)
	}
	ev := struct {
		ID       string `json:"id"`
		Object   string `json:"object"`
		Type     string `json:"type"`
		Created  int64  `json:"created"`
		Livemode bool   `json:"livemode"`
		Data     struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}{ID: id, Object: "event", Type: typ, Created: created.Unix(), Livemode: mode.Livemode}
	ev.Data.Object = obj
	return json.Marshal(ev)
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}
