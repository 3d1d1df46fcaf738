package receiver

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// errOverBudget is returned when the server already holds as many body
// bytes as its budget allows.
var errOverBudget = errors.New("request-body budget exhausted")

// budget bounds the body bytes that in-flight deliveries may hold. Each
// delivery reserves what it may read (its declared length, or the limit
// when it declares none) before reading a byte, and releases it when it is
// answered; a reservation that does not fit is refused at once, so a crowd
// of clients that declare large bodies and send nothing cannot make the
// server allocate for them.
type budget struct {
	mu    sync.Mutex
	max   int64
	used  int64
	gauge prometheus.Gauge
}

func (b *budget) reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	if b.gauge != nil {
		b.gauge.Set(float64(b.used))
	}
	return true
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.gauge != nil {
		b.gauge.Set(float64(b.used))
	}
}

// readBody reads at most limit bytes: a declared Content-Length past the
// limit is refused unread, and an undeclared body is cut off while reading.
// Memory grows with the bytes that actually arrive, never with what the
// client declares. release must be called once the body is no longer
// needed (it is a no-op after an error).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, b *budget) (body []byte, release func(), err error) {
	if r.ContentLength > limit {
		return nil, func() {}, &http.MaxBytesError{Limit: limit}
	}
	want := limit
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	if !b.reserve(want) {
		return nil, func() {}, errOverBudget
	}
	var once sync.Once
	release = func() { once.Do(func() { b.release(want) }) }
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, http.MaxBytesReader(w, r.Body, limit)); err != nil {
		release()
		return nil, func() {}, err
	}
	return buf.Bytes(), release, nil
}
