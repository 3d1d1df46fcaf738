package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// StripeAPI reaches Stripe's REST API, for the jobs that read an object
// back (a subscription whose events tie, the object a thin event names).
type StripeAPI struct {
	Base string // without /v1
	Key  string
	HTTP *http.Client
}

// APIRefusal is an answer of Stripe's API that a retry would get again: a
// 404 for an object Stripe does not have, 401/403 for the key, a request
// that cannot be made. Every other failure (the network, 429, 5xx) is worth
// retrying.
type APIRefusal struct {
	Status string
	// Code is the HTTP status Stripe answered; 0 when no request was made.
	Code int
}

func (e *APIRefusal) Error() string { return "Stripe answered " + e.Status }

// Get reads the resource at path into v, on behalf of the connected
// account stripeContext when it is set, within ten seconds.
func (api StripeAPI) Get(ctx context.Context, path, stripeContext string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.Base+path, nil)
	if err != nil {
		return &APIRefusal{Status: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+api.Key)
	if stripeContext != "" {
		req.Header.Set("Stripe-Context", stripeContext)
	}
	hc := api.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("GET %s: Stripe answered %s", path, resp.Status)
	default:
		return &APIRefusal{Status: resp.Status + " to GET " + path, Code: resp.StatusCode}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
