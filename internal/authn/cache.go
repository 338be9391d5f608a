package authn

import (
	"container/list"
	"sync"
	"time"
)

// ttlCache is a map bounded in size whose entries expire. Every entry of
// one cache lives for the same TTL, so insertion order is expiry order: a
// full cache evicts its oldest entry, the one that would expire first.
type ttlCache[V any] struct {
	mu      sync.Mutex
	ttl     time.Duration
	max     int
	entries map[string]*list.Element
	order   *list.List // of *ttlEntry[V], oldest first
}

type ttlEntry[V any] struct {
	key     string
	value   V
	expires time.Time
}

func newTTLCache[V any](ttl time.Duration, maxEntries int) *ttlCache[V] {
	return &ttlCache[V]{ttl: ttl, max: maxEntries, entries: make(map[string]*list.Element), order: list.New()}
}

// get returns the value under key if it has not expired at now.
func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.entries[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*ttlEntry[V])
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.entries, key)
		return zero, false
	}
	return e.value, true
}

// put stores value under key until now + the cache's TTL, evicting the
// oldest entries while the cache is full.
func (c *ttlCache[V]) put(key string, value V, now time.Time) {
	if c.ttl <= 0 || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.order.Remove(el)
		delete(c.entries, key)
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*ttlEntry[V]).key)
	}
	c.entries[key] = c.order.PushBack(&ttlEntry[V]{key: key, value: value, expires: now.Add(c.ttl)})
}

// flight runs one call per key at a time: callers that ask for a key
// whose call is under way wait for its answer instead of making their
// own (golang.org/x/sync/singleflight's idea, in a few lines).
type flight[V any] struct {
	mu    sync.Mutex
	calls map[string]*call[V]
}

type call[V any] struct {
	done  chan struct{}
	value V
	err   error
}

func (f *flight[V]) do(key string, fn func() (V, error)) (V, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = make(map[string]*call[V])
	}
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		<-c.done
		return c.value, c.err
	}
	c := &call[V]{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.calls, key)
		f.mu.Unlock()
		close(c.done)
	}()
	c.value, c.err = fn()
	return c.value, c.err
}
