package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// PaddleOptions selects the events to pull from Paddle Billing.
type PaddleOptions struct {
	APIBase string
	APIKey  string
	Since   time.Time
	Until   time.Time // zero: now
	Types   []string
	HTTP    *http.Client
	// MaxPages bounds a run.
	MaxPages int
	// After resumes a run that stopped at its page cap: the id of the last
	// event it handed on (Stats.Resume).
	After string
}

// Paddle pages GET /events newest first (ids grow with time) through
// meta.pagination.next, from o.After when set, hands every event that
// occurred in the window to sink, and stops after the page that reaches
// events older than the window.
func Paddle(ctx context.Context, o PaddleOptions, sink Sink, progress func(Stats)) (Stats, error) {
	r := &run{sink: sink, progress: progress}
	return r.result(paddle(ctx, o, r))
}

func paddle(ctx context.Context, o PaddleOptions, r *run) error {
	c := newClient(o.HTTP, func(req *http.Request) { req.Header.Set("Authorization", "Bearer "+o.APIKey) })
	q := url.Values{"per_page": {"200"}, "order_by": {"id[DESC]"}}
	if len(o.Types) > 0 {
		q.Set("event_type", strings.Join(o.Types, ","))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	next := o.APIBase + "/events?" + q.Encode()
	maxPages := o.MaxPages
	if maxPages <= 0 {
		maxPages = 10_000
	}
	last := o.After
	for page := 0; next != ""; page++ {
		if page == maxPages {
			r.update(func(s *Stats) { s.Truncated, s.Resume = true, last })
			return fmt.Errorf("%w (%d pages); run it again with --after %s to go on", ErrTruncated, maxPages, last)
		}
		body, _, err := c.do(ctx, http.MethodGet, next)
		if err != nil {
			return fmt.Errorf("list paddle events: %w", err)
		}
		var p struct {
			Data []json.RawMessage `json:"data"`
			Meta struct {
				Pagination struct {
					Next    string `json:"next"`
					HasMore bool   `json:"has_more"`
				} `json:"pagination"`
			} `json:"meta"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("paddle events page: %w", err)
		}
		// Newest first: once a page reaches past the window's start, the
		// pages after it hold older events only.
		older := false
		for _, raw := range p.Data {
			var ev struct {
				EventID    string    `json:"event_id"`
				EventType  string    `json:"event_type"`
				OccurredAt time.Time `json:"occurred_at"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				return fmt.Errorf("paddle event: %w", err)
			}
			last = ev.EventID
			if ev.OccurredAt.Before(o.Since) {
				older = true
				continue
			}
			if (!o.Until.IsZero() && ev.OccurredAt.After(o.Until)) || (len(o.Types) > 0 && !slices.Contains(o.Types, ev.EventType)) {
				continue
			}
			r.fetched(1)
			r.deliver(ctx, Fetched{ID: ev.EventID, Type: ev.EventType, Body: raw, Header: http.Header{}})
		}
		next = ""
		if p.Meta.Pagination.HasMore && !older {
			next = p.Meta.Pagination.Next
		}
	}
	return nil
}
