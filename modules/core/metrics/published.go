package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PublishedLists reports the published sender address lists in use
// (allow_ips: stripe, github): hookledger_published_ips_age_seconds, each
// list's age from the fetched_at that hookledger ips update recorded, and
// hookledger_published_ips_stale, 1 while that age is over
// PUBLISHED_IPS_MAX_AGE. Both are computed when /metrics is scraped, so a
// list that crosses the max age while the process runs reads 1 from then
// on, without a restart.
type PublishedLists struct {
	// NowFunc is the clock ages are measured by; time.Now unless a test
	// sets it before the first scrape.
	NowFunc func() time.Time

	mu    sync.Mutex
	lists map[string]publishedList
	age   *prometheus.Desc
	stale *prometheus.Desc
}

type publishedList struct {
	fetchedAt time.Time
	maxAge    time.Duration
}

// NewPublishedLists returns a collector with no lists in use.
func NewPublishedLists() *PublishedLists {
	return &PublishedLists{
		NowFunc: time.Now,
		lists:   map[string]publishedList{},
		age: prometheus.NewDesc("hookledger_published_ips_age_seconds",
			"Age of each published sender address list in use (stripe, github), from its fetched_at.", []string{"list"}, nil),
		stale: prometheus.NewDesc("hookledger_published_ips_stale",
			"1 while a published sender address list in use is older than PUBLISHED_IPS_MAX_AGE: run hookledger ips update.", []string{"list"}, nil),
	}
}

// Track reports list from now on, fetched at fetchedAt and stale after maxAge.
func (p *PublishedLists) Track(list string, fetchedAt time.Time, maxAge time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lists[list] = publishedList{fetchedAt: fetchedAt, maxAge: maxAge}
}

// Describe implements prometheus.Collector.
func (p *PublishedLists) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.age
	ch <- p.stale
}

// Collect implements prometheus.Collector.
func (p *PublishedLists) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.NowFunc()
	for name, l := range p.lists {
		age := now.Sub(l.fetchedAt)
		stale := 0.0
		if age > l.maxAge {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(p.age, prometheus.GaugeValue, age.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(p.stale, prometheus.GaugeValue, stale, name)
	}
}
