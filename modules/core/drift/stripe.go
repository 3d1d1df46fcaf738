package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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
// it is not zero, and hands each page to fn with the second it was asked
// for.
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
// and 5xx, and returns the second Stripe was asked. A 404 wraps ErrGone;
// another answer no retry changes (401, 403, 400) is returned as is.
func StripeGet(ctx context.Context, api provider.StripeAPI, path string, v any) (time.Time, error) {
	backoff := retryBase
	for attempt := 1; ; attempt++ {
		at := time.Unix(time.Now().Unix(), 0)
		err := api.Get(ctx, path, "", v)
		var refused *provider.APIRefusal
		switch {
		case err == nil:
			return at, nil
		case errors.As(err, &refused) && refused.Code == http.StatusNotFound:
			return at, fmt.Errorf("%w: %w", ErrGone, err)
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

// StripeEvent is a repair as a Stripe snapshot event: what a delivery of
// the change would have carried, created when Stripe was asked. livemode
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
