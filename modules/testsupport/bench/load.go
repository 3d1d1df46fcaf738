package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// benchTemplate is a real delivery from testdata, sent as delivered: only
// the literals that make an event itself (its id, its time, the object it
// is about) change from one event to the next.
type benchTemplate struct {
	provider, typ, file string
	subs                []benchSub
}

// benchSub replaces every occurrence of a literal of the delivered body.
type benchSub struct {
	old string
	new func(id string, i int) string
}

func quoted(s string) string { return strconv.Quote(s) }

// benchEpoch is the first event's time; event i happened i seconds (Stripe,
// GitHub) or milliseconds (Paddle) later, so every object's events are
// ordered.
var benchEpoch = time.Now().Add(-24 * 365 * time.Hour)

// benchObjects is how many objects (subscriptions, invoices, payments)
// the events are about: event i is about object i mod benchObjects.
const benchObjects = 500

// benchObjectID is the id of the object event i is about, under a
// provider's id prefix (sub_, in_, pi_).
func benchObjectID(prefix string, i int) string {
	return fmt.Sprintf("%sbench%019d", prefix, i%benchObjects)
}

func stripeSubs(eventID, created, object, objectPrefix string) []benchSub {
	return []benchSub{
		{quoted(eventID), func(id string, _ int) string { return quoted(id) }},
		{`"created": ` + created, func(_ string, i int) string {
			return `"created": ` + strconv.FormatInt(benchEpoch.Unix()+int64(i), 10)
		}},
		{object, func(_ string, i int) string { return benchObjectID(objectPrefix, i) }},
	}
}

var (
	// subscriptionUpdated is the default payload: Stripe's
	// customer.subscription.updated, 7 KB as delivered.
	subscriptionUpdated = benchTemplate{"stripe", "customer.subscription.updated", "stripe/customer.subscription.updated.json",
		stripeSubs("evt_composed_sub_updated_0002", "1234567960", "sub_1Pgc6rB7WZ01zgkWNy0Cn5nw", "sub_")}
	// benchMix adds other providers' and types' real payloads, sent in turn.
	benchMix = []benchTemplate{
		subscriptionUpdated,
		{"stripe", "invoice.paid", "stripe/invoice.paid.json",
			stripeSubs("evt_composed_invoice_paid_0004", "1234567990", "in_1Pgc6tB7WZ01zgkWu9fdqL6I", "in_")},
		{"stripe", "payment_intent.succeeded", "stripe/payment_intent.succeeded.json",
			stripeSubs("evt_composed_pi_succeeded_0005", "1234567995", "pi_1PgafyB7WZ01zgkWSjxsAJo3", "pi_")},
		{"github", "push", "github/push.default.json", []benchSub{
			{`"pushed_at": 1557933657`, func(_ string, i int) string {
				return `"pushed_at": ` + strconv.FormatInt(benchEpoch.Unix()+int64(i), 10)
			}},
			// Pushes to benchObjects repositories, as the other providers'
			// events are about that many objects: every push to one branch
			// at hundreds a second would measure a lock convoy on its row.
			{`"full_name": "Codertocat/Hello-World"`, func(_ string, i int) string {
				return fmt.Sprintf(`"full_name": "bench/repository-%d"`, i%benchObjects)
			}},
		}},
		{"paddle", "subscription.updated", "paddle/subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json", []benchSub{
			{quoted("evt_01hg0trpmmdkkdbk4p8czp4drm"), func(id string, _ int) string { return quoted(id) }},
			{quoted("2023-11-24T14:12:01.813044Z"), func(_ string, i int) string {
				return quoted(benchEpoch.Add(time.Duration(i) * time.Millisecond).UTC().Format("2006-01-02T15:04:05.000000Z"))
			}},
			{"sub_01gyssnczp81czs49zcprm6hfv", func(_ string, i int) string { return benchObjectID("sub_", i) }},
		}},
	}
)

// benchPiece is a literal part of a template's body, or (sub >= 0) a place
// where a substitution goes.
type benchPiece struct {
	text []byte
	sub  int
}

type loadedTemplate struct {
	benchTemplate
	pieces []benchPiece
	size   int
}

// payloads makes the events of a run from its templates, in turn.
type payloads struct {
	prefix    string
	templates []loadedTemplate
	// base is where this phase's events count from, so that every phase's
	// events are newer than the previous phase's and their ids differ.
	base   int
	phases *int
}

// benchDelivery is one event to send.
type benchDelivery struct {
	Provider, ID, Type string
	Body               []byte
}

// loadPayloads reads the templates' files from dir (testdata/providers).
func loadPayloads(dir, prefix string, templates []benchTemplate) (*payloads, error) {
	p := &payloads{prefix: prefix, phases: new(int)}
	for _, t := range templates {
		body, err := os.ReadFile(filepath.Join(dir, t.file))
		if err != nil {
			return nil, fmt.Errorf("bench payload (run from the repository root or set --testdata): %w", err)
		}
		lt := loadedTemplate{benchTemplate: t, size: len(body)}
		for len(body) > 0 {
			at, which := len(body), -1
			for k, s := range t.subs {
				if i := bytes.Index(body, []byte(s.old)); i >= 0 && i < at {
					at, which = i, k
				}
			}
			lt.pieces = append(lt.pieces, benchPiece{text: body[:at], sub: -1})
			if which < 0 {
				break
			}
			lt.pieces = append(lt.pieces, benchPiece{sub: which})
			body = body[at+len(t.subs[which].old):]
		}
		for k, s := range t.subs {
			if !slices.ContainsFunc(lt.pieces, func(pc benchPiece) bool { return pc.sub == k }) {
				return nil, fmt.Errorf("bench payload %s: %q not found", t.file, s.old)
			}
		}
		p.templates = append(p.templates, lt)
	}
	return p, nil
}

// with returns the same templates for the next phase, under another id
// prefix.
func (p *payloads) with(prefix string) *payloads {
	*p.phases++
	return &payloads{prefix: prefix, templates: p.templates, base: *p.phases * PhaseEvents, phases: p.phases}
}

// at returns the same templates and phase, under another id prefix,
// with events counted from offset: a phase that drives several rounds
// takes each from the phase's own range, so that its events stay in the
// past however many rounds it drives (a phase's events are PhaseEvents
// seconds of event time, and a run's phases share one year).
func (p *payloads) at(prefix string, offset int) *payloads {
	return &payloads{prefix: prefix, templates: p.templates, base: p.base + offset, phases: p.phases}
}

// PhaseEvents bounds the events of one phase.
const PhaseEvents = 1_000_000

// event builds event i.
func (p *payloads) event(i int) benchDelivery {
	t := &p.templates[i%len(p.templates)]
	i += p.base
	id := fmt.Sprintf("evt_%s_%d", p.prefix, i)
	if t.provider == "github" {
		id = fmt.Sprintf("%08x-0000-4000-8000-%012d", i, i)
	}
	body := make([]byte, 0, t.size+64)
	for _, pc := range t.pieces {
		if pc.sub < 0 {
			body = append(body, pc.text...)
		} else {
			body = append(body, t.subs[pc.sub].new(id, i)...)
		}
	}
	return benchDelivery{Provider: t.provider, ID: id, Type: t.typ, Body: body}
}

// sizes describes the payloads' sizes.
func (p *payloads) sizes() string {
	var s string
	for i, t := range p.templates {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s %.1f KB", t.provider, t.typ, float64(t.size)/1024)
	}
	return s
}

// drive posts events signed events from clients goroutines, open loop at
// rate (0: as fast as they go), and returns each request's latency.
func drive(ctx context.Context, base string, gen *payloads, events, clients int, rate float64) ([]time.Duration, int64) {
	lat, errs, _ := driveFailure(ctx, base, gen, events, clients, rate)
	return lat, errs
}

// driveFailure is drive that also describes the first failed request.
func driveFailure(ctx context.Context, base string, gen *payloads, events, clients int, rate float64) ([]time.Duration, int64, string) {
	var (
		first  atomic.Value
		next   atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		lat    = make([]time.Duration, 0, events)
		wg     sync.WaitGroup
		starts <-chan time.Time
	)
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		starts = t.C
	}
	host := strings.TrimPrefix(base, "http://")
	for range clients {
		wg.Go(func() {
			c := &loadClient{host: host}
			defer c.close()
			local := make([]time.Duration, 0, events/clients+1)
			for ctx.Err() == nil {
				if starts != nil {
					<-starts
				}
				i := int(next.Add(1))
				if i > events {
					break
				}
				d := gen.event(i)
				p, _ := provider.Lookup(d.Provider)
				h, err := p.Sign(benchSecret, provider.Delivery{ID: d.ID, Type: d.Type, Body: d.Body})
				if err != nil {
					errs.Add(1)
					continue
				}
				t0 := time.Now()
				status, err := c.post("/webhooks/"+d.Provider, h, d.Body)
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				local = append(local, time.Since(t0))
				if status != http.StatusOK {
					errs.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("status %d after %s", status, time.Since(t0).Round(time.Millisecond)))
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	failure, _ := first.Load().(string)
	return lat, errs.Load(), failure
}

// loadClient is one keep-alive HTTP/1.1 connection of the load generator.
// It writes each request in one write and reads the answer with net/http's
// own parser (http.ReadResponse), without http.Client's connection pool
// and its two goroutines per connection: the generator shares the two
// cores with the service and PostgreSQL, and should take as little of
// them as the baselines' pgx clients do.
type loadClient struct {
	host string
	conn net.Conn
	br   *bufio.Reader
	buf  []byte
}

// loadTimeout bounds one request.
const loadTimeout = 30 * time.Second

// post sends body to path with the headers h and returns the status.
func (c *loadClient) post(path string, h http.Header, body []byte) (int, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.host, loadTimeout)
		if err != nil {
			return 0, err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	b := append(c.buf[:0], "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	for k, vs := range h {
		for _, v := range vs {
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	b = append(append(b, "\r\n"...), body...)
	c.buf = b
	_ = c.conn.SetDeadline(time.Now().Add(loadTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.close()
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		c.close()
	}
	return resp.StatusCode, err
}

func (c *loadClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// latency is a phase's latency percentiles, in milliseconds.
type latency struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

func percentiles(d []time.Duration) latency {
	slices.Sort(d)
	at := func(p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(len(d)-1, int(float64(len(d))*p/100))]) / float64(time.Millisecond)
	}
	return latency{P50: at(50), P95: at(95), P99: at(99)}
}
