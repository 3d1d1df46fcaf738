package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// StripeOptions selects the events to pull from Stripe.
type StripeOptions struct {
	APIBase    string // without /v1
	APIKey     string
	Since      time.Time
	Until      time.Time // zero: now
	Types      []string  // at most 20, as Stripe allows
	FailedOnly bool      // delivery_success=false
	HTTP       *http.Client
}

// Stripe pages GET /v1/events (newest first, 100 a page) and hands every
// event to sink.
func Stripe(ctx context.Context, o StripeOptions, sink Sink, progress func(Stats)) (Stats, error) {
	r := &run{sink: sink, progress: progress}
	return r.result(stripe(ctx, o, r))
}

func stripe(ctx context.Context, o StripeOptions, r *run) error {
	if len(o.Types) > 20 {
		return fmt.Errorf("stripe accepts at most 20 types, got %d", len(o.Types))
	}
	c := newClient(o.HTTP, func(req *http.Request) { req.SetBasicAuth(o.APIKey, "") })
	q := url.Values{}
	q.Set("limit", "100")
	q.Set("created[gte]", strconv.FormatInt(o.Since.Unix(), 10))
	if !o.Until.IsZero() {
		q.Set("created[lte]", strconv.FormatInt(o.Until.Unix(), 10))
	}
	for _, t := range o.Types {
		q.Add("types[]", t)
	}
	if o.FailedOnly {
		q.Set("delivery_success", "false")
	}
	for {
		body, _, err := c.do(ctx, http.MethodGet, o.APIBase+"/v1/events?"+q.Encode())
		if err != nil {
			return fmt.Errorf("list stripe events: %w", err)
		}
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("stripe events page: %w", err)
		}
		r.fetched(len(page.Data))
		last := ""
		for _, raw := range page.Data {
			var ev struct{ ID, Type string }
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("stripe event: %w", err)
			}
			r.deliver(ctx, Fetched{ID: ev.ID, Type: ev.Type, Body: raw, Header: http.Header{}})
			last = ev.ID
		}
		if !page.HasMore || last == "" {
			return nil
		}
		q.Set("starting_after", last)
	}
}
