package shortcircuit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	// DefaultFailures is how many consecutive failed calls open the breaker.
	DefaultFailures = 5
	// DefaultOpenFor is how long an open breaker stops asking Redis.
	DefaultOpenFor = 5 * time.Second
	// maxReadableID is the longest event id kept readable in a key.
	maxReadableID = 128
	// writeBatch is the most markers one pipelined round trip writes.
	writeBatch = 256
	// minDialTimeout bounds background dials; minIdleConns are kept ready.
	minDialTimeout = 250 * time.Millisecond
	minIdleConns   = 8
)

// Options configure a Gate; zero fields take the defaults.
type Options struct {
	// URL is REDIS_URL: redis://[user:password@]host:port[/db],
	// rediss:// for TLS, or unix:///path.
	URL     string
	Prefix  string
	TTL     time.Duration
	Timeout time.Duration
	// QueueSize bounds the marker writes waiting for the writer.
	QueueSize int
	Failures  int
	OpenFor   time.Duration
	// NowFunc is the breaker's clock; time.Now when nil.
	NowFunc func() time.Time
}

// Gate is the short-circuit: lookups on the request path and a background
// marker writer. A nil *Gate is "no Redis": Seen is always false and Mark
// does nothing.
type Gate struct {
	rdb     *redis.Client
	opts    Options
	breaker *breaker
	queue   chan string
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once

	hits    *prometheus.CounterVec
	errs    *prometheus.CounterVec
	dropped prometheus.Counter
	open    prometheus.Gauge
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
	opts.Failures = or(opts.Failures, DefaultFailures)
	opts.OpenFor = or(opts.OpenFor, DefaultOpenFor)
	if opts.NowFunc == nil {
		opts.NowFunc = time.Now
	}
	// Every bound on the request path is the call's own context: one dial
	// attempt, no retry, no wait for a pooled connection longer than the
	// call may take. Idle connections are kept dialled in the background
	// (where DialTimeout applies), and RESP2 needs no HELLO round trip, so
	// a lookup is one command on a ready connection.
	ropts.ContextTimeoutEnabled = true
	ropts.MaxRetries = -1
	ropts.DialerRetries = 1
	ropts.DialTimeout = max(opts.Timeout, minDialTimeout)
	ropts.PoolTimeout = opts.Timeout
	ropts.MinIdleConns = max(ropts.MinIdleConns, minIdleConns)
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
	g.breaker = &breaker{threshold: opts.Failures, openFor: opts.OpenFor, now: opts.NowFunc, gauge: g.open}
	go g.write()
	return g, nil
}

// Collectors are the Gate's metrics, for the process's registry.
func (g *Gate) Collectors() []prometheus.Collector {
	return []prometheus.Collector{g.hits, g.errs, g.dropped, g.open}
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
	if g == nil || !g.breaker.allow() {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()
	n, err := g.rdb.Exists(cctx, g.Key(namespace, eventID)).Result()
	if ctx.Err() != nil {
		g.breaker.abandon() // the caller went away: no verdict on Redis
		return false
	}
	g.record("lookup", err)
	if err != nil || n == 0 {
		return false
	}
	g.hits.WithLabelValues(source).Inc()
	return true
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
	if !g.breaker.allow() {
		g.dropped.Add(float64(len(keys)))
		return
	}
	// A batch gets the lookup timeout per hundred markers: still bounded,
	// and off the request path.
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.Timeout*time.Duration(1+len(keys)/100))
	defer cancel()
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, "1", g.opts.TTL)
		}
		return nil
	})
	g.record("mark", err)
	if err != nil {
		g.dropped.Add(float64(len(keys)))
	}
}

// record counts a failed call and tells the breaker how the call went; an
// absent key is a success. No free connection in time is this process's
// own congestion, not a verdict on Redis.
func (g *Gate) record(op string, err error) {
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		g.breaker.record(true)
	case errors.Is(err, redis.ErrPoolTimeout):
		g.errs.WithLabelValues(op).Inc()
		g.breaker.abandon()
	default:
		g.errs.WithLabelValues(op).Inc()
		g.breaker.record(false)
	}
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
