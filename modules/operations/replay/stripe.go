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
	FailedOnly bool      // delivery_success=false; thin events have no such filter
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

// StripeThin pages GET /v2/core/events, Stripe's thin events (newest
// first, page after page through next_page_url), for the same window and
// types as Stripe, and hands every event to sink: a thin event is claimed
// under its own id like a delivered one, so what the ledger has is a
// duplicate. The v2 API has no delivery filter: FailedOnly is not applied,
// and every thin event of the window is offered to the claim.
func StripeThin(ctx context.Context, o StripeOptions, sink Sink, progress func(Stats)) (Stats, error) {
	r := &run{sink: sink, progress: progress}
	return r.result(stripeThin(ctx, o, r))
}

// thinEventsPath is the v2 events list; a next_page_url must stay on it.
const thinEventsPath = "/v2/core/events"

func stripeThin(ctx context.Context, o StripeOptions, r *run) error {
	if len(o.Types) > 20 {
		return fmt.Errorf("stripe accepts at most 20 types, got %d", len(o.Types))
	}
	// API v2 takes the key as a bearer token, its times in RFC 3339, and
	// repeats an array's parameter (types=a&types=b).
	c := newClient(o.HTTP, func(req *http.Request) { req.Header.Set("Authorization", "Bearer "+o.APIKey) })
	q := url.Values{}
	q.Set("created[gte]", o.Since.UTC().Format(time.RFC3339))
	if !o.Until.IsZero() {
		q.Set("created[lte]", o.Until.UTC().Format(time.RFC3339))
	}
	for _, t := range o.Types {
		q.Add("types", t)
	}
	next := thinEventsPath + "?" + q.Encode()
	for next != "" {
		body, _, err := c.do(ctx, http.MethodGet, o.APIBase+next)
		if err != nil {
			return fmt.Errorf("list stripe thin events: %w", err)
		}
		var page struct {
			Data        []json.RawMessage `json:"data"`
			NextPageURL *string           `json:"next_page_url"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("stripe thin events page: %w", err)
		}
		r.fetched(len(page.Data))
		for _, raw := range page.Data {
			var ev struct{ ID, Type string }
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("stripe thin event: %w", err)
			}
			r.deliver(ctx, Fetched{ID: ev.ID, Type: ev.Type, Body: raw, Header: http.Header{}})
		}
		next = ""
		if page.NextPageURL != nil && *page.NextPageURL != "" && len(page.Data) > 0 {
			if next, err = thinNextPage(*page.NextPageURL); err != nil {
				return err
			}
		}
	}
	return nil
}

// thinNextPage checks a next_page_url: a path of the events list on the
// same API, never another host or endpoint.
func thinNextPage(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Path != thinEventsPath {
		return "", fmt.Errorf("stripe thin events: next_page_url %q is not a page of %s", raw, thinEventsPath)
	}
	return u.RequestURI(), nil
}
