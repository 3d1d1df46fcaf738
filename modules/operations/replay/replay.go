package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Stats counts one replay run; the CLI prints it as its last line.
type Stats struct {
	Fetched   int64 `json:"fetched"`
	New       int64 `json:"new"`
	Duplicate int64 `json:"duplicate"`
	Failed    int64 `json:"failed"`
	// Erased counts events not claimed because they hold a subject
	// `hookledger erase` erased in the namespace (direct mode only).
	Erased int64 `json:"erased,omitempty"`
	// Truncated is set when the run stopped at its page cap while the
	// provider had more; Resume is where a next run picks up (Paddle: the
	// --after of the next run).
	Truncated bool   `json:"truncated,omitempty"`
	Resume    string `json:"resume,omitempty"`
}

// ErrTruncated is returned when a run stopped before the provider's last
// page: the stats are not complete.
var ErrTruncated = errors.New("replay stopped at its page cap before the last page")

// Fetched is one event fetched from a provider's API: its exact JSON and the
// headers a delivery of it would carry.
type Fetched struct {
	ID     string
	Type   string
	Body   []byte
	Header http.Header
}

// Sink takes fetched events and reports whether each was new.
type Sink interface {
	Deliver(ctx context.Context, ev Fetched) (bool, error)
}

// Claimer is the part of the ledger replay writes through: *ledger.Store.
type Claimer interface {
	Claim(ctx context.Context, in ledger.Claim) (ledger.ClaimResult, error)
	ErasedIn(ctx context.Context, namespace string, payload []byte) ([]string, error)
}

// ErrErasedSubject is a Sink's refusal of an event that holds a subject
// erased in its namespace: claimed, it would write the subject back.
var ErrErasedSubject = errors.New("the event holds an erased subject")

// Direct claims events in this process, through intake's Prepare and the
// ledger's Claim, as the HTTP path does; rows are marked replayed. An
// event that holds a subject erased in the namespace is not claimed
// (ErrErasedSubject).
type Direct struct {
	Source  *intake.Source
	Claimer Claimer
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
}

// Deliver claims ev.
func (d *Direct) Deliver(ctx context.Context, ev Fetched) (bool, error) {
	now := time.Now
	if d.NowFunc != nil {
		now = d.NowFunc
	}
	claim, parsed, err := d.Source.Prepare(ev.Header, ev.Body, nil, now())
	if err != nil {
		return false, err
	}
	if parsed.Ignore {
		return false, nil
	}
	erased, err := d.Claimer.ErasedIn(ctx, claim.Namespace, claim.Payload)
	if err != nil {
		return false, err
	}
	if len(erased) > 0 {
		return false, ErrErasedSubject
	}
	res, err := d.Claimer.Claim(ctx, claim)
	return res == ledger.Claimed, err
}

// Target re-POSTs events to a receiver elsewhere with X-Replay-Token, which
// that receiver honours instead of a signature.
type Target struct {
	URL   string
	Token string
	HTTP  *http.Client
}

// Deliver posts ev and reads the receiver's answer.
func (t *Target) Deliver(ctx context.Context, ev Fetched) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return false, err
	}
	for k, v := range ev.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(intake.ReplayTokenHeader, t.Token)
	resp, err := t.HTTP.Do(req)
	if err != nil {
		return false, fmt.Errorf("post %s: %w", ev.ID, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("post %s: %s %s", ev.ID, resp.Status, bytes.TrimSpace(raw))
	}
	return out.Status == "claimed", nil
}

// run counts deliveries into a sink and reports progress.
type run struct {
	sink     Sink
	progress func(Stats)
	mu       sync.Mutex
	stats    Stats
	errs     []error
}

func (r *run) fetched(n int) {
	r.update(func(s *Stats) { s.Fetched += int64(n) })
}

func (r *run) deliver(ctx context.Context, ev Fetched) {
	claimed, err := r.sink.Deliver(ctx, ev)
	r.update(func(s *Stats) {
		switch {
		case errors.Is(err, ErrErasedSubject):
			s.Erased++
		case err != nil:
			s.Failed++
			if len(r.errs) < 10 {
				r.errs = append(r.errs, fmt.Errorf("%s: %w", ev.ID, err))
			}
		case claimed:
			s.New++
		default:
			s.Duplicate++
		}
	})
}

func (r *run) update(fn func(*Stats)) {
	r.mu.Lock()
	fn(&r.stats)
	s := r.stats
	r.mu.Unlock()
	if r.progress != nil {
		r.progress(s)
	}
}

// result returns the stats and, when some events failed, why.
func (r *run) result(err error) (Stats, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && len(r.errs) > 0 {
		err = fmt.Errorf("%d event(s) failed: %w", r.stats.Failed, errors.Join(r.errs...))
	}
	return r.stats, err
}
