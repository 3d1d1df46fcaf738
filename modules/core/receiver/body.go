package receiver

import (
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
// Past a first buffer of at most firstAlloc, sized by the declared length
// and inside the budget it reserved, memory grows with the bytes that
// actually arrive, never with what the client declares. release must be
// called once the body is no longer needed (it is a no-op after an error).
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
	body, err = readAll(http.MaxBytesReader(w, r.Body, limit), min(want, firstAlloc))
	if err != nil {
		release()
		return nil, func() {}, err
	}
	return body, release, nil
}

// firstAlloc bounds the buffer a body is first read into, sized by its
// declared length: a typical delivery is read into one allocation of its
// own size, and a larger one grows as its bytes arrive. What it allocates
// before a byte arrives is inside the budget the declaration reserved.
const firstAlloc = 32 << 10

// readAll is io.ReadAll into a buffer of size bytes first, with one byte
// more so that a body of exactly the declared length meets its end
// without growing the buffer.
func readAll(r io.Reader, size int64) ([]byte, error) {
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as append does
		}
	}
}
