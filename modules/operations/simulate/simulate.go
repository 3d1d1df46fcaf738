// Package simulate plays a webhook provider against a receiver: correctly
// signed events at a set rate and concurrency, with duplicate deliveries,
// reordering, and provider-like retries until each delivery got a 2xx. It
// also says what the receiver's state must be afterwards, so fault tests
// can check that nothing was lost or applied twice.
package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// Options shape one run.
type Options struct {
	// URL is the receiver's endpoint, e.g. http://127.0.0.1:8080/webhooks/stripe.
	URL      string
	Provider *provider.Provider
	Secret   string
	// Events is the number of distinct events; Prefix makes their ids unique
	// across runs.
	Events int
	Prefix string
	// Duplicates is the share of events delivered a second time (0.3: 30%).
	Duplicates float64
	// Reorder is the share of deliveries moved out of order.
	Reorder float64
	// Rate caps deliveries per second; 0 sends as fast as Concurrency allows.
	Rate        float64
	Concurrency int
	// Retry: each delivery is retried until a 2xx, waiting RetryBackoff
	// (doubling, at most 5 s) between attempts, until Deadline passes.
	RetryBackoff time.Duration
	Deadline     time.Duration
	HTTP         *http.Client
	Seed         uint64
	// Samples, when set, are sent in turn, each with fresh ids (Sample.Build);
	// else each provider's default generator, whose Expect the fault tests
	// check.
	Samples []Sample
	// ProgressFunc, when set, is called after each delivery with the
	// number of deliveries answered so far and the total.
	ProgressFunc func(done, total int)
}

// Report is what was sent and what came back.
type Report struct {
	Events     int            `json:"events"`
	Deliveries int            `json:"deliveries"`
	Duplicates int            `json:"duplicates_sent"`
	Retries    int            `json:"retries"`
	Acked      int            `json:"acked"`
	Unacked    []string       `json:"unacked"`
	Responses  map[string]int `json:"responses"`
	Elapsed    float64        `json:"elapsed_seconds"`
	// Expect is the state the receiver must reach once everything acked is
	// applied exactly once.
	Expect Expectation `json:"-"`
	// AckedIDs are the event ids that got a 2xx.
	AckedIDs []string `json:"-"`
}

// Expectation is the business state events imply.
type Expectation struct {
	// Usage is customer → total quantity (usage.recorded deltas).
	Usage map[string]int64
	// Subscriptions is external id → the newest event's status and version.
	Subscriptions map[string]SubscriptionState
}

// SubscriptionState is a subscription's expected newest state.
type SubscriptionState struct {
	Status  string
	Version int64
}

type delivery struct {
	event *event
	copy  int
}

// Run sends the events and waits for every delivery to be acknowledged or
// the deadline to pass.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 100 * time.Millisecond
	}
	if o.Deadline <= 0 {
		o.Deadline = 2 * time.Minute
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	gen, err := generator(o)
	if err != nil {
		return nil, err
	}
	events := make([]*event, o.Events)
	for i := range events {
		if events[i], err = gen(o.Prefix, i, o.Events); err != nil {
			return nil, err
		}
	}
	var plan []delivery
	for _, ev := range events {
		plan = append(plan, delivery{event: ev})
		if rng.Float64() < o.Duplicates {
			plan = append(plan, delivery{event: ev, copy: 1})
		}
	}
	for i := range plan {
		if rng.Float64() < o.Reorder {
			j := min(len(plan)-1, i+1+rng.IntN(16))
			plan[i], plan[j] = plan[j], plan[i]
		}
	}
	r := &Report{Events: len(events), Deliveries: len(plan), Responses: map[string]int{}, Expect: expect(events)}
	for _, d := range plan {
		if d.copy > 0 {
			r.Duplicates++
		}
	}

	ctx, cancel := context.WithTimeout(ctx, o.Deadline)
	defer cancel()
	start := time.Now()
	var (
		mu       sync.Mutex
		answered int
		acked    = map[string]bool{}
		wg       sync.WaitGroup
		queue    = make(chan delivery)
	)
	var tick <-chan time.Time
	if o.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
		defer t.Stop()
		tick = t.C
	}
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range queue {
				status, retries := send(ctx, o, d.event)
				mu.Lock()
				r.Retries += retries
				r.Responses[status]++
				if status == "200 claimed" || status == "200 duplicate" {
					acked[d.event.id] = true
				}
				answered++
				n := answered
				mu.Unlock()
				if o.ProgressFunc != nil {
					o.ProgressFunc(n, len(plan))
				}
			}
		}()
	}
feed:
	for _, d := range plan {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case queue <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	for _, ev := range events {
		if acked[ev.id] {
			r.AckedIDs = append(r.AckedIDs, ev.id)
		} else {
			r.Unacked = append(r.Unacked, ev.id)
		}
	}
	r.Acked = len(r.AckedIDs)
	r.Elapsed = time.Since(start).Seconds()
	if r.Unacked == nil {
		r.Unacked = []string{}
	}
	return r, nil
}

// generator picks the event generator of a run.
func generator(o Options) (func(prefix string, i, n int) (*event, error), error) {
	if len(o.Samples) == 0 {
		gen, ok := generators[o.Provider.Name]
		if !ok {
			return nil, fmt.Errorf("simulate: no event generator for %s", o.Provider.Name)
		}
		return func(prefix string, i, n int) (*event, error) { return gen(prefix, i, n), nil }, nil
	}
	for _, s := range o.Samples {
		if s.Provider != o.Provider.Name {
			return nil, fmt.Errorf("simulate: %s is not a %s event type", s.Type, o.Provider.Name)
		}
	}
	ts := o.Samples
	return func(_ string, i, _ int) (*event, error) {
		d, err := ts[i%len(ts)].Build("", time.Now())
		if err != nil {
			return nil, err
		}
		return &event{id: d.ID, typ: d.Type, body: d.Body}, nil
	}, nil
}

// send delivers one event until a 2xx, re-signing each attempt as
// providers do; it returns the last answer and the number of retries.
func send(ctx context.Context, o Options, ev *event) (string, int) {
	backoff := o.RetryBackoff
	for attempt := 0; ; attempt++ {
		status := post(ctx, o, ev)
		if status == "200 claimed" || status == "200 duplicate" || ctx.Err() != nil {
			return status, attempt
		}
		select {
		case <-ctx.Done():
			return status, attempt
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func post(ctx context.Context, o Options, ev *event) string {
	h, err := o.Provider.Sign(o.Secret, provider.Delivery{ID: ev.id, Type: ev.typ, At: time.Now(), Body: ev.body})
	if err != nil {
		return "sign error"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL, bytes.NewReader(ev.body))
	if err != nil {
		return "request error"
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return "connection error"
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var out struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &out)
	if out.Status != "" {
		return fmt.Sprintf("%d %s", resp.StatusCode, out.Status)
	}
	return fmt.Sprint(resp.StatusCode)
}

// Summary lists the responses, most frequent first.
func (r *Report) Summary() []string {
	keys := make([]string, 0, len(r.Responses))
	for k := range r.Responses {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r.Responses[keys[i]] > r.Responses[keys[j]] })
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%6d  %s", r.Responses[k], k)
	}
	return out
}
