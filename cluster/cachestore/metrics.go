package cachestore

import (
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// ObjectCounts is the collector of kerf_leader_cached_objects: how many
// objects each informer of the leader's cache holds, by the kind it
// watches.
//
// The kind is "ReplicaSet", or "ReplicaSet (metadata)" for a
// metadata-only watch. The cache is most of the leader's memory
// (docs/performance.md). The gauge tells an operator what it holds. A
// second informer of a kind (a reader asking for the metadata of a kind
// already held whole) shows as a second series.
type ObjectCounts struct {
	desc *prometheus.Desc

	mu     sync.Mutex
	stores []cachedStore
}

// cachedStore is one informer's store and the kind it holds.
type cachedStore struct {
	kind  string
	store toolscache.Store
}

// NewObjectCounts returns the collector of kerf_leader_cached_objects,
// registered with reg; its NewInformer makes the informers it counts.
func NewObjectCounts(reg prometheus.Registerer) *ObjectCounts {
	c := &ObjectCounts{desc: prometheus.NewDesc("kerf_leader_cached_objects",
		"Objects held by the leader's cache, by the kind each informer watches (a metadata-only informer as \"Kind (metadata)\").",
		[]string{"kind"}, nil)}
	reg.MustRegister(c)
	return c
}

// NewInformer is the cache's cache.Options.NewInformer: client-go's
// shared informer, its store counted.
func (c *ObjectCounts) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	kind := reflect.TypeOf(obj).Elem().Name()
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		kind = m.GetObjectKind().GroupVersionKind().Kind + " (metadata)"
	}
	c.mu.Lock()
	c.stores = append(c.stores, cachedStore{kind: kind, store: inf.GetStore()})
	c.mu.Unlock()
	return inf
}

// Describe implements prometheus.Collector.
func (c *ObjectCounts) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: one series per kind, the sum
// of its informers (a cache of several namespaces has one per namespace).
func (c *ObjectCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	counts := map[string]int{}
	for _, s := range c.stores {
		counts[s.kind] += len(s.store.ListKeys())
	}
	c.mu.Unlock()
	for kind, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), kind)
	}
}
