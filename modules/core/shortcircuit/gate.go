package shortcircuit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of Options.
const (
	DefaultPrefix    = "hookledger:sc:"
	DefaultTTL       = 60 * time.Second
	DefaultTimeout   = 5 * time.Millisecond
	DefaultQueueSize = 4096
	// DefaultFailureRate is the share of failed calls over the breaker's
	// window that opens it.
	DefaultFailureRate = 0.5
	// DefaultMinCalls is how many calls the window must hold before their
	// failure rate opens the breaker.
	DefaultMinCalls = 20
	// DefaultWindow is how far back the breaker counts calls.
	DefaultWindow = 10 * time.Second
	// DefaultOpenFor is how long an open breaker first stops asking Redis;
	// the pause doubles with each failed probe, up to DefaultMaxOpenFor.
	DefaultOpenFor    = time.Second
	DefaultMaxOpenFor = 30 * time.Second
	// maxReadableID is the longest event id kept readable in a key.
	maxReadableID = 128
	// writeBatch is the most markers one pipelined round trip writes, and
	// markTimeout how long it may take.
	writeBatch  = 256
	markTimeout = time.Second
	// minDialTimeout bounds background dials; minIdleConns are kept ready,
	// so that a burst of deliveries does not dial on the request path.
	minDialTimeout = 250 * time.Millisecond
	minIdleConns   = 32
	// minPoolSize is how many lookups may be in flight before one waits
	// for a connection (unless REDIS_URL sets pool_size): on a loaded host
	// a connection is handed back only once its caller is scheduled again,
	// and queueing for one, not Redis, was most of a lookup's latency.
	minPoolSize = 128
	// connBuffer is each connection's read and write buffer: a lookup's
	// command and reply are a few dozen bytes (pipelines have buffers of
	// their own).
	connBuffer = 4 << 10
)

// Options configure a Gate; zero fields take the defaults.
type Options struct {
	// URL is REDIS_URL: redis://[user:password@]host:port[/db],
	// rediss:// for TLS, or unix:///path.
	URL    string
	Prefix string
	TTL    time.Duration
	// Timeout is REDIS_TIMEOUT, the shortest a lookup waits: each lookup
	// waits twice the p99 of the recent lookups' latencies, at least
	// Timeout and at most MaxTimeout (or Timeout, when longer).
	Timeout    time.Duration
	MaxTimeout time.Duration
	// QueueSize bounds the marker writes waiting for the writer.
	QueueSize int
	// The breaker opens when, over Window, at least MinCalls calls gave a
	// verdict and at least FailureRate of them failed; it then stops
	// asking Redis for OpenFor, and lets one probe through at a time; each
	// failed probe doubles the pause, up to MaxOpenFor.
	FailureRate float64
	MinCalls    int
	Window      time.Duration
	OpenFor     time.Duration
	MaxOpenFor  time.Duration
	// NowFunc is the breaker's clock; time.Now when nil.
	NowFunc func() time.Time
}

// Gate is the short-circuit: lookups on the request path and a background
// marker writer. A nil *Gate is "no Redis": Seen is always false and Mark
// does nothing.
type Gate struct {
	rdb      *redis.Client
	opts     Options
	breaker  *breaker
	timeouts *timeouts
	queue    chan string
	stop     chan struct{}
	stopped  chan struct{}
	once     sync.Once

	hits    *prometheus.CounterVec
	errs    *prometheus.CounterVec
	dropped prometheus.Counter
	open    prometheus.Gauge
	timeout prometheus.GaugeFunc
}

// New builds a Gate on opts.URL and starts its marker writer; Close stops
// it. It does not connect: an unreachable server is "no marker" until it
// answers.
func New(opts Options) (*Gate, error) {
	ropts, err := redis.ParseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.Prefix = or(opts.Prefix, DefaultPrefix)
	opts.TTL = or(opts.TTL, DefaultTTL)
	opts.Timeout = or(opts.Timeout, DefaultTimeout)
	opts.QueueSize = or(opts.QueueSize, DefaultQueueSize)
	opts.MaxTimeout = max(or(opts.MaxTimeout, DefaultMaxTimeout), opts.Timeout)
	opts.FailureRate = or(opts.FailureRate, DefaultFailureRate)
	opts.MinCalls = or(opts.MinCalls, DefaultMinCalls)
	opts.Window = or(opts.Window, DefaultWindow)
	opts.OpenFor = or(opts.OpenFor, DefaultOpenFor)
	opts.MaxOpenFor = or(opts.MaxOpenFor, DefaultMaxOpenFor)
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	// Every bound on the request path is the call's own context: one dial
	// attempt, no retry, no wait for a pooled connection longer than the
	// call's timeout. Idle connections are kept dialled in the background
	// (where DialTimeout applies), and RESP2 needs no HELLO round trip, so
	// a lookup is one command on a ready connection.
	ropts.ContextTimeoutEnabled = true
	ropts.MaxRetries = -1
	ropts.DialerRetries = 1
	ropts.DialTimeout = max(opts.MaxTimeout, minDialTimeout)
	ropts.PoolTimeout = opts.MaxTimeout
	if ropts.PoolSize == 0 {
		ropts.PoolSize = max(minPoolSize, 10*runtime.GOMAXPROCS(0))
	}
	ropts.MinIdleConns = min(max(ropts.MinIdleConns, minIdleConns), ropts.PoolSize)
	ropts.ReadBufferSize, ropts.WriteBufferSize = connBuffer, connBuffer
	if ropts.Protocol == 0 {
		ropts.Protocol = 2
	}
	ropts.DisableIdentity = true
	ropts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	g := &Gate{
		rdb:     redis.NewClient(ropts),
		opts:    opts,
		queue:   make(chan string, opts.QueueSize),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_redis_shortcircuit_total",
			Help: "Duplicate deliveries answered from a Redis marker, without a database transaction, by configured source.",
		}, []string{"source"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_redis_errors_total",
			Help: "Redis calls that failed or timed out (lookup, mark); each lookup went to PostgreSQL instead.",
		}, []string{"op"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookledger_redis_markers_dropped_total",
			Help: "Markers not written (queue full, breaker open, write failed or shut down); the next duplicate costs a database transaction.",
		}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_redis_breaker_open",
			Help: "1 while the circuit breaker stops asking a failing Redis, else 0.",
		}),
	}
	g.breaker = &breaker{window: opts.Window, minCalls: opts.MinCalls, rate: opts.FailureRate, openFor: opts.OpenFor,
		maxOpenFor: opts.MaxOpenFor, now: opts.NowFunc, gauge: g.open}
	g.timeouts = newTimeouts(opts.Timeout, opts.MaxTimeout)
	g.timeout = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookledger_redis_lookup_timeout_seconds",
		Help: "How long the next Redis lookup may take: twice the p99 of recent lookups, between REDIS_TIMEOUT and its ceiling.",
	}, func() float64 { return g.timeouts.timeout().Seconds() })
	go g.write()
	return g, nil
}

// Collectors are the Gate's metrics, for the process's registry.
func (g *Gate) Collectors() []prometheus.Collector {
	return []prometheus.Collector{g.hits, g.errs, g.dropped, g.open, g.timeout}
}

// Key is the Redis key of an event: the prefix, the namespace and the id,
// or the id's SHA-256 when it is long. Namespaces hold no ':' or '#', so
// no two events share a key.
func (g *Gate) Key(namespace, eventID string) string {
	if len(eventID) > maxReadableID {
		sum := sha256.Sum256([]byte(eventID))
		return g.opts.Prefix + namespace + "#" + hex.EncodeToString(sum[:])
	}
	return g.opts.Prefix + namespace + ":" + eventID
}

// Seen reports whether the event has a fresh marker, counting a hit for
// source. Any error, a timeout or an open breaker is false.
func (g *Gate) Seen(ctx context.Context, source, namespace, eventID string) bool {
	if g == nil {
		return false
	}
	t, ok := g.breaker.allow()
	if !ok {
		return false
	}
	key := g.Key(namespace, eventID)
	n, err := g.exists(ctx, t, key, false)
	if errors.Is(err, errUnsent) {
		// The deadline passed before the command went out: this process
		// was not scheduled in time, which says nothing about Redis, and a
		// claim would now wait as long. Ask once more.
		n, err = g.exists(ctx, t, key, true)
	}
	if err != nil || n == 0 {
		return false
	}
	g.hits.WithLabelValues(source).Inc()
	return true
}

// errUnsent is a lookup whose deadline passed before its command was sent.
var errUnsent = errors.New("redis: deadline passed before the command was sent")

// exists asks Redis whether key exists, within the current timeout, and
// records how it went; unless last, a lookup that was never sent returns
// errUnsent and records nothing.
func (g *Gate) exists(ctx context.Context, t ticket, key string, last bool) (int64, error) {
	start, timeout := time.Now(), g.timeouts.timeout()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := g.rdb.Exists(cctx, key).Result()
	took := time.Since(start)
	switch {
	case ctx.Err() != nil:
		g.breaker.abandon(t) // the caller went away: no verdict on Redis
		return 0, ctx.Err()
	case !last && unsent(err):
		return 0, errUnsent
	}
	g.lookup(t, err, took, timeout, cctx.Err() != nil)
	return n, err
}

// lookup records how a lookup went: its latency for the timeouts, and a
// verdict for the breaker. A lookup that timed out before the ceiling says
// the timeout was short, not that Redis failed; one that waited the
// ceiling in vain is a failure. One that was never sent (no connection
// free in time, or the deadline gone before the write) is this process's
// own delay: neither a latency nor a verdict.
func (g *Gate) lookup(t ticket, err error, took, timeout time.Duration, expired bool) {
	timedOut := expired || isTimeout(err)
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		g.timeouts.observe(took)
		g.breaker.record(t, true)
	case timedOut && !unsent(err):
		g.errs.WithLabelValues("lookup").Inc()
		g.timeouts.observe(took)
		if timeout >= g.opts.MaxTimeout {
			g.breaker.record(t, false)
		} else {
			g.breaker.abandon(t)
		}
	default:
		g.record(t, "lookup", err)
	}
}

// unsent reports whether a call failed before its command was sent: its
// deadline passed waiting for a connection or before the write. A dial
// that timed out is not: an unreachable server is a failure.
func unsent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "write" && op.Timeout()
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Mark queues the event's marker. Call it only once the ledger holds the
// event. It never blocks: with the queue full or the breaker open the
// marker is dropped.
func (g *Gate) Mark(namespace, eventID string) {
	if g == nil {
		return
	}
	select {
	case <-g.stop:
		g.dropped.Inc()
		return
	default:
	}
	select {
	case g.queue <- g.Key(namespace, eventID):
	default:
		g.dropped.Inc()
	}
}

// Close stops the writer, dropping the markers still queued, and closes
// the client.
func (g *Gate) Close() error {
	if g == nil {
		return nil
	}
	g.once.Do(func() { close(g.stop) })
	<-g.stopped
	return g.rdb.Close()
}

// write drains the queue: each round trip sets the markers queued so far
// (up to writeBatch) in one pipeline.
func (g *Gate) write() {
	defer close(g.stopped)
	keys := make([]string, 0, writeBatch)
	for {
		select {
		case <-g.stop:
			g.dropped.Add(float64(len(g.queue)))
			return
		case k := <-g.queue:
			keys = append(keys[:0], k)
		}
	more:
		for len(keys) < writeBatch {
			select {
			case k := <-g.queue:
				keys = append(keys, k)
			default:
				break more
			}
		}
		g.set(keys)
	}
}

func (g *Gate) set(keys []string) {
	t, ok := g.breaker.allow()
	if !ok {
		g.dropped.Add(float64(len(keys)))
		return
	}
	// Off the request path a batch may take its time: a marker dropped
	// costs a transaction later.
	ctx, cancel := context.WithTimeout(context.Background(), max(markTimeout, g.opts.MaxTimeout))
	defer cancel()
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, "1", g.opts.TTL)
		}
		return nil
	})
	g.record(t, "mark", err)
	if err != nil {
		g.dropped.Add(float64(len(keys)))
	}
}

// record counts a failed call and tells the breaker how the call went; an
// absent key is a success. A call never sent is this process's own delay,
// not a verdict on Redis.
func (g *Gate) record(t ticket, op string, err error) {
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		g.breaker.record(t, true)
	case unsent(err):
		g.errs.WithLabelValues(op).Inc()
		g.breaker.abandon(t)
	default:
		g.errs.WithLabelValues(op).Inc()
		g.breaker.record(t, false)
	}
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
