package metrics

import (
	"sync"
	"time"
)

// Recent counts events per key over the last day in one-minute buckets, for
// "in the last hour / day" answers from this process.
type Recent struct {
	mu      sync.Mutex
	buckets map[string]*[1440]bucket
	now     func() time.Time
}

type bucket struct {
	minute int64
	n      int64
}

// NewRecent returns an empty counter.
func NewRecent() *Recent { return &Recent{buckets: map[string]*[1440]bucket{}, now: time.Now} }

// Add counts one event for key now.
func (r *Recent) Add(key string) {
	m := r.now().Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[key]
	if !ok {
		b = new([1440]bucket)
		r.buckets[key] = b
	}
	slot := &b[m%1440]
	if slot.minute != m {
		*slot = bucket{minute: m}
	}
	slot.n++
}

// Counts returns key's events in the last hour and the last day.
func (r *Recent) Counts(key string) (hour, day int64) {
	m := r.now().Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[key]
	if !ok {
		return 0, 0
	}
	for _, s := range b {
		age := m - s.minute
		if age < 0 || age >= 1440 {
			continue
		}
		day += s.n
		if age < 60 {
			hour += s.n
		}
	}
	return hour, day
}

// Keys lists the keys seen.
func (r *Recent) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.buckets))
	for k := range r.buckets {
		keys = append(keys, k)
	}
	return keys
}
