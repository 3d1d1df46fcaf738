package receiver

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errTooSlow is returned when a body arrives slower than the minimum data
// rate once its grace period is over; the connection is closed.
var errTooSlow = errors.New("request body arriving too slowly")

const (
	// firstChunk is what a delivery reserves, and allocates, before its
	// first byte arrives (its declared length when smaller): an idle
	// connection holds this much of the budget and no more, about what the
	// HTTP server itself buffers per connection.
	firstChunk = 4 << 10
	// bodyGrace is how long a body may take before the minimum data rate
	// applies: a delivery whose body is not complete by then must have
	// averaged bodyMinRate since.
	bodyGrace = 5 * time.Second
	// bodyMinRate (bytes per second) is the slowest average a body may
	// arrive at after bodyGrace: with the default limits, any body slower
	// than this would take longer than HTTP_READ_TIMEOUT anyway.
	bodyMinRate = 1 << 10
)

// bodyReader reads delivery bodies within their source's limit, the
// budget and the minimum data rate.
type bodyReader struct {
	budget  *budget
	grace   time.Duration
	minRate int64 // bytes per second
}

// read reads at most limit bytes of r's body for the client address, a
// delivery to source (trusted: the client is in the source's allow_ips):
// a declared Content-Length past the limit is refused unread, and an
// undeclared body is cut off while reading. Memory and the budget grow with
// the bytes that actually arrive, never with what the client declares: a
// first chunk, then twice the buffer each time a byte past it arrives, up
// to the declared length (or the limit). A body that arrives slower than
// the minimum rate after the grace period is cut off (errTooSlow: its
// connection can no longer be read, and must be closed). release
// must be called once the body is no longer needed (it is a no-op after an
// error).
func (br *bodyReader) read(w http.ResponseWriter, r *http.Request, client, source string, trusted bool, limit int64) (body []byte, release func(), err error) {
	if r.ContentLength > limit {
		return nil, func() {}, &http.MaxBytesError{Limit: limit}
	}
	want := limit
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	h := &hold{budget: br.budget, client: clientKey(client), source: source, small: want <= smallBody, trusted: trusted}
	var once sync.Once
	release = func() { once.Do(h.release) }
	p := startPace(w, br.grace, br.minRate)
	body, err = readAll(http.MaxBytesReader(w, r.Body, limit), want, h, &p.got)
	if p.stop() {
		err = errTooSlow
	}
	if err != nil {
		release()
		return nil, func() {}, err
	}
	return body, release, nil
}

// readAll reads r to its end, at most want bytes (r itself enforces the
// limit). The buffer is the reservation plus one byte: a body of exactly
// the reserved length meets its end without growing, and a byte landing
// in the spare slot is the proof that more has arrived, so past the first
// chunk the reservation is never more than twice the bytes received.
func readAll(r io.Reader, want int64, h *hold, got *atomic.Int64) ([]byte, error) {
	size := min(want, firstChunk)
	if err := h.grow(size); err != nil {
		return nil, err
	}
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		got.Add(int64(n))
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			next := min(want, 2*h.n)
			if next <= h.n {
				// More than the declared length: the HTTP server never
				// lets this happen.
				return nil, io.ErrUnexpectedEOF
			}
			if err := h.grow(next - h.n); err != nil {
				return nil, err
			}
			nb := make([]byte, len(b), next+1)
			copy(nb, b)
			b = nb
		}
	}
}

// pace enforces the minimum data rate on one body: the body must have
// arrived by start + grace + got/minRate, the deadline moving on with every
// byte (as Apache's mod_reqtimeout MinRate). A watchdog checks it when it
// is due; a body behind it has its connection's read deadline set in the
// past, which ends the read at once. The server's own read timeout is never
// extended.
type pace struct {
	got atomic.Int64

	mu      sync.Mutex
	timer   *time.Timer
	start   time.Time
	grace   time.Duration
	minRate int64
	abort   func() error
	done    bool
	cut     bool
}

func startPace(w http.ResponseWriter, grace time.Duration, minRate int64) *pace {
	rc := http.NewResponseController(w)
	p := &pace{
		start: time.Now(), grace: grace, minRate: minRate,
		abort: func() error { return rc.SetReadDeadline(time.Now()) },
	}
	p.mu.Lock()
	p.timer = time.AfterFunc(grace, p.check)
	p.mu.Unlock()
	return p
}

// due is how long after the start a body of which got bytes arrived may
// wait for its next byte.
func due(got int64, grace time.Duration, minRate int64) time.Duration {
	return grace + time.Duration(got)*time.Second/time.Duration(minRate)
}

func (p *pace) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	late := due(p.got.Load(), p.grace, p.minRate) - time.Since(p.start)
	if late > 0 {
		p.timer.Reset(late)
		return
	}
	// Where the deadline cannot be set, the server's read timeout still
	// ends the read.
	p.cut = p.abort() == nil
}

// stop ends the watchdog and reports whether it cut the body off; if it
// did, the connection can no longer be read and must be closed.
func (p *pace) stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	p.timer.Stop()
	return p.cut
}
