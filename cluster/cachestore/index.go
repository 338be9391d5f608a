package cachestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Scope is the lists an index answers.
type Scope int

const (
	// Namespaced indexes answer lists in one namespace
	// (client.InNamespace) and no others: a list across all namespaces
	// finds nothing through them.
	Namespaced Scope = iota
	// ClusterWide indexes answer lists across all namespaces and no
	// others: a list in one namespace finds nothing through them.
	ClusterWide
)

// How many keys an index spreads a namespace's objects over (a
// ClusterWide index, the cluster's). A list of one value reads its
// bucket's objects. Fewer buckets cost less memory and more objects read
// a lookup: docs/performance.md, "The seventh round", has the figures
// (TestBucketsHoldLessThanAKeyAPod).
const (
	namespacedBuckets  = 128
	clusterWideBuckets = 4096
)

// buckets is the number of buckets of an index of scope.
func (scope Scope) buckets() uint32 {
	if scope == ClusterWide {
		return clusterWideBuckets
	}
	return namespacedBuckets
}

// The names controller-runtime's cache reader (pkg/cache/internal,
// FieldIndexName and KeyToNamespacedKey) looks an index and its values up
// by. The Cache answers lists through an index itself but for a cache of
// several namespaces, where it lists the bucket through the wrapped
// cache's reader. TestListsFindTheIndexedObjects fails if a new version
// names them otherwise.
const (
	fieldIndexPrefix = "field:"
	allNamespaces    = "__all_namespaces"
)

// Cache is a controller-runtime cache whose lists by a field this
// package indexed (Indexer) are answered exactly from the value's bucket.
// Every other call is the wrapped cache's. A reader that bypasses it (the
// wrapped cache's own List) would get the whole bucket.
type Cache struct {
	cache.Cache
	scheme *runtime.Scheme

	mu      sync.RWMutex
	indexes map[indexKey]index
	// views are the kinds whose informers store viewers (storesViews),
	// each with an object of its kind (what the Cache asks its informer
	// for).
	views map[schema.GroupKind]client.Object
	// metas are the kinds whose metadata a Get of a
	// metav1.PartialObjectMetadata reads from their typed informer
	// (getMeta): those of views and those answersMeta declared.
	metas map[schema.GroupKind]client.Object
}

// indexKey names an index: a kind and a field.
type indexKey struct {
	kind  schema.GroupKind
	field string
}

// index is what the Cache knows of an index. That is the lists it
// answers, its buckets, how an object's values are found, and an object
// of its kind, which the Cache asks its informer for.
type index struct {
	scope   Scope
	buckets uint32
	extract client.IndexerFunc
	obj     client.Object
}

// wrap returns c as a Cache; scheme maps its objects and lists to kinds
// (nil: client-go's scheme, as controller-runtime's default).
func wrap(c cache.Cache, scheme *runtime.Scheme) *Cache {
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	return &Cache{Cache: c, scheme: scheme, indexes: map[indexKey]index{}, views: map[schema.GroupKind]client.Object{},
		metas: map[schema.GroupKind]client.Object{}}
}

// Indexer returns an Indexer whose indexes answer the lists of scope, with
// the scope's buckets.
func (c *Cache) Indexer(scope Scope) Indexer {
	return Indexer{c: c, scope: scope, buckets: scope.buckets()}
}

// Indexer is a client.FieldIndexer over a Cache whose indexes answer the
// lists of one Scope.
type Indexer struct {
	c       *Cache
	scope   Scope
	buckets uint32
}

var _ client.FieldIndexer = Indexer{}

// withBuckets returns ix keeping its objects under n buckets (at least 1)
// rather than the scope's.
func (ix Indexer) withBuckets(n uint32) Indexer {
	ix.buckets = max(n, 1)
	return ix
}

// IndexField implements client.FieldIndexer: it adds field to the
// informer of obj's kind. Each object goes under the bucket of each value
// extract returns: its namespace's bucket, or the cluster's for a
// ClusterWide index.
func (ix Indexer) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	gvk, err := apiutil.GVKForObject(obj, ix.c.scheme)
	if err != nil {
		return fmt.Errorf("index %T by %s: %w", obj, field, err)
	}
	informer, err := ix.c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for %T: %w", obj, err)
	}
	idx := index{scope: ix.scope, buckets: ix.buckets, extract: extract, obj: obj}
	if err := informer.AddIndexers(toolscache.Indexers{fieldIndexPrefix + field: idx.keys}); err != nil {
		return fmt.Errorf("index %T by %s: %w", obj, field, err)
	}
	ix.c.mu.Lock()
	ix.c.indexes[indexKey{gvk.GroupKind(), field}] = idx
	ix.c.mu.Unlock()
	return nil
}

// keys is the index's client-go IndexFunc: the keys of raw's values, each
// once (two values may share a bucket).
func (idx index) keys(raw any) ([]string, error) {
	o, ok := raw.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", raw)
	}
	values := idx.extract(o)
	keys := make([]string, 0, len(values))
	for _, v := range values {
		if k := idx.key(o.GetNamespace(), v); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// key is the index key of value for an object in ns, or a list of ns: its
// bucket. The bucket is under the namespace for a Namespaced index, and
// under all namespaces for a ClusterWide one or an object of no namespace.
func (idx index) key(ns, value string) string {
	if idx.scope == ClusterWide {
		ns = ""
	}
	return idx.listKey(ns, value)
}

// listKey is the index key a list of value in ns reads, as
// controller-runtime's KeyToNamespacedKey makes it. An empty ns is all
// namespaces. A Namespaced index has nothing under all namespaces, a
// ClusterWide one nothing under one namespace.
func (idx index) listKey(ns, value string) string {
	if ns == "" {
		ns = allNamespaces
	}
	return ns + "/" + idx.bucket(value)
}

// bucket is value's bucket: FNV-1a of its bytes, modulo the buckets.
func (idx index) bucket(value string) string {
	h := uint32(2166136261)
	for i := 0; i < len(value); i++ {
		h ^= uint32(value[i])
		h *= 16777619
	}
	return strconv.FormatUint(uint64(h%idx.buckets), 10)
}

// holds reports whether o's own values of the index include value.
func (idx index) holds(o client.Object, value string) bool {
	return slices.Contains(idx.extract(o), value)
}

// lookup is the index of field on gk's objects, if this package added it.
func (c *Cache) lookup(gk schema.GroupKind, field string) (index, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx, ok := c.indexes[indexKey{gk, field}]
	return idx, ok
}

// List implements client.Reader, answering a list by a field this package
// indexed exactly. Such a list's field selector is one exact match. It
// reads that value's bucket and keeps the objects whose own value it is.
// Every other list is the wrapped cache's.
func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := client.ListOptions{}
	lo.ApplyOptions(opts)
	field, value, ok := exactField(lo.FieldSelector)
	if !ok {
		return c.wrappedList(ctx, list, lo, opts)
	}
	gvk, err := apiutil.GVKForObject(list, c.scheme)
	if err != nil {
		return c.wrappedList(ctx, list, lo, opts)
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	idx, ok := c.lookup(gvk.GroupKind(), field)
	if !ok {
		return c.wrappedList(ctx, list, lo, opts)
	}
	if lo.Continue != "" {
		return fmt.Errorf("continue list option is not supported by the cache")
	}
	informer, err := c.GetInformer(ctx, idx.obj)
	if err != nil {
		return fmt.Errorf("list %s by %s: %w", gvk.Kind, field, err)
	}
	stored, err := idx.inBucket(informer, field, idx.listKey(lo.Namespace, value), value)
	if errors.Is(err, ErrNoIndexer) {
		// A cache of several namespaces has an informer per namespace:
		// the wrapped cache lists the bucket (copies), and only the
		// value's objects are kept.
		return c.listBucket(ctx, list, idx, field, value, lo)
	}
	if err != nil {
		return fmt.Errorf("list %s by %s: %w", gvk.Kind, field, err)
	}
	copyObjects := lo.UnsafeDisableDeepCopy == nil || !*lo.UnsafeDisableDeepCopy
	var kept []client.Object
	for _, item := range stored {
		if lo.Limit > 0 && int64(len(kept)) >= lo.Limit {
			break
		}
		o := item.(client.Object) // inBucket keeps objects only
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		kept = append(kept, o)
	}
	if copyObjects {
		out := make([]runtime.Object, len(kept))
		for i, o := range kept {
			out[i] = o.DeepCopyObject()
			out[i].GetObjectKind().SetGroupVersionKind(gvk)
		}
		err = apimeta.SetList(list, out)
	} else {
		err = setViews(list, kept)
	}
	if err != nil {
		return fmt.Errorf("list %s by %s: %w", gvk.Kind, field, err)
	}
	list.SetContinue("continue-not-supported")
	return nil
}

// wrappedList lists through the wrapped cache, lo being opts applied. A
// list of a kind storesViews declared, asking for no copy, gets views
// where listViews can give them, else copies.
func (c *Cache) wrappedList(ctx context.Context, list client.ObjectList, lo client.ListOptions, opts []client.ListOption) error {
	if lo.UnsafeDisableDeepCopy == nil || !*lo.UnsafeDisableDeepCopy {
		return c.Cache.List(ctx, list, opts...)
	}
	gvk, viewed := c.viewed(list)
	if viewed == nil {
		return c.Cache.List(ctx, list, opts...)
	}
	if lo.FieldSelector == nil {
		if handled, err := c.listViews(ctx, list, gvk, viewed, lo); handled {
			return err
		}
	}
	lo.UnsafeDisableDeepCopy = nil
	return c.Cache.List(ctx, list, &lo)
}

// listBucket lists value's bucket through the wrapped cache and keeps the
// objects whose own value it is. The wrapped cache's reader looks the
// index up by the bucket as it would by a value.
func (c *Cache) listBucket(ctx context.Context, list client.ObjectList, idx index, field, value string, lo client.ListOptions) error {
	lo.FieldSelector = fields.OneTermEqualSelector(field, idx.bucket(value))
	if lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy {
		if _, viewed := c.viewed(list); viewed != nil {
			lo.UnsafeDisableDeepCopy = nil // copies: no view of a stored form here
		}
	}
	if err := c.Cache.List(ctx, list, &lo); err != nil {
		return err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("list by %s: %w", field, err)
	}
	kept := items[:0]
	for _, item := range items {
		if o, ok := item.(client.Object); ok && idx.holds(o, value) {
			kept = append(kept, item)
		}
	}
	return apimeta.SetList(list, kept)
}

// exactField is the field and value of a selector that is one exact match.
func exactField(sel fields.Selector) (field, value string, ok bool) {
	if sel == nil {
		return "", "", false
	}
	reqs := sel.Requirements()
	if len(reqs) != 1 || (reqs[0].Operator != "=" && reqs[0].Operator != "==") {
		return "", "", false
	}
	return reqs[0].Field, reqs[0].Value, true
}

// indexerOf is informer's own indexer, or ErrNoIndexer.
func indexerOf(informer cache.Informer) (toolscache.Indexer, error) {
	si, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, fmt.Errorf("%T: %w", informer, ErrNoIndexer)
	}
	return si.GetIndexer(), nil
}

// ErrNoIndexer says an informer has no indexer of its own to look up:
// the informer of a cache of several namespaces (one per namespace).
var ErrNoIndexer = errors.New("the informer has no indexer of its own")

// Lookup returns the objects of obj's kind whose field is value, from
// informer, the Cache's informer of that kind. field is an index this
// package added: of scope ClusterWide, or Namespaced and looked up in ns.
//
// It returns the informer's own objects, not copies, in the form its
// transform stores them; they must only be read. It is for the hot paths
// that would otherwise copy an object to read a few of its fields. On an
// informer without an indexer of its own it fails with ErrNoIndexer, and
// the caller lists instead.
func (c *Cache) Lookup(informer cache.Informer, obj client.Object, field, ns, value string) ([]any, error) {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return nil, fmt.Errorf("index %s of %T: %w", field, obj, err)
	}
	idx, ok := c.lookup(gvk.GroupKind(), field)
	if !ok {
		return nil, fmt.Errorf("no index %s of %s added by this package", field, gvk.Kind)
	}
	return idx.inBucket(informer, field, idx.key(ns, value), value)
}

// Stored returns the object of namespace ns and name that informer, a
// Cache's informer, holds. As Lookup, it returns the informer's own
// object, not a copy, in the form its transform stores it; it must only
// be read. ok is false when it holds none. On an informer without an
// indexer of its own it fails with ErrNoIndexer, and the caller reads a
// copy instead.
func Stored(informer cache.Informer, ns, name string) (obj client.Object, ok bool, err error) {
	indexer, err := indexerOf(informer)
	if err != nil {
		return nil, false, fmt.Errorf("get %s/%s: %w", ns, name, err)
	}
	item, exists, err := indexer.GetByKey(toolscache.ObjectName{Namespace: ns, Name: name}.String())
	if err != nil || !exists {
		return nil, false, err
	}
	obj, isObject := item.(client.Object)
	if !isObject {
		return nil, false, fmt.Errorf("cache contained %T, which is not an Object", item)
	}
	return obj, true, nil
}

// allStored returns every object informer, a Cache's informer, holds, in
// no order. They are its own, not copies, in the form its transform
// stores them, to be read only. It costs one slice, where a list costs a
// struct an object. On an informer without an indexer of its own it
// fails with ErrNoIndexer, and the caller lists copies instead.
func allStored(informer cache.Informer) ([]any, error) {
	indexer, err := indexerOf(informer)
	if err != nil {
		return nil, fmt.Errorf("all: %w", err)
	}
	return indexer.List(), nil
}

// inBucket returns the objects under key of field's index whose own value
// is value, from informer's own indexer. They are not copies. It fails
// with ErrNoIndexer when the informer has no indexer of its own.
func (idx index) inBucket(informer cache.Informer, field, key, value string) ([]any, error) {
	indexer, err := indexerOf(informer)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", field, err)
	}
	stored, err := indexer.ByIndex(fieldIndexPrefix+field, key)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", field, err)
	}
	kept := stored[:0]
	for _, item := range stored {
		o, ok := item.(client.Object)
		if !ok {
			return nil, fmt.Errorf("cache contained %T, which is not an Object", item)
		}
		if idx.holds(o, value) {
			kept = append(kept, item)
		}
	}
	return kept, nil
}
