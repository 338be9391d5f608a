// Package cacheindex adds field indexes to a controller-runtime cache that
// keep each object under one key per value, not two.
//
// controller-runtime's own IndexField keys every object of a namespace
// twice, once under "<namespace>/<value>" for lists in one namespace and
// once under "__all_namespaces/<value>" for lists across all of them, and
// client-go's indexer keeps a set of object keys per index key. For
// indexes whose values are nearly unique (a pod's UID, a workload's UID, a
// recommendation's target) that is two small maps per object: at 25,000
// workloads the leader's indexes held 43 MB of such sets, more than the
// pods' specs (docs/performance.md, "Where the leader's memory goes").
// Every index the leader reads is read one way only: a workload's pods and
// ReplicaSets and its recommendations in its namespace, a pod by UID across
// all namespaces. An Indexer of this package keeps the one key its Scope
// answers, under the names controller-runtime's cache reader looks up, so
// reads stay client.List with client.MatchingFields.
package cacheindex

import (
	"context"
	"errors"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// The names controller-runtime's cache reader (pkg/cache/internal,
// FieldIndexName and KeyToNamespacedKey) looks an index and its values up
// by; TestListsFindTheIndexedObjects fails if a new version names them
// otherwise.
const (
	fieldIndexPrefix = "field:"
	allNamespaces    = "__all_namespaces"
)

// Indexer is a client.FieldIndexer over a cache whose indexes answer the
// lists of one Scope.
type Indexer struct {
	informers cache.Informers
	scope     Scope
}

// New returns an Indexer over c (a manager's cache, before it starts)
// whose indexes answer the lists of scope.
func New(c cache.Informers, scope Scope) Indexer { return Indexer{informers: c, scope: scope} }

var _ client.FieldIndexer = Indexer{}

// IndexField implements client.FieldIndexer: it adds field to the
// informer of obj's kind, each object under one key per value extract
// returns.
func (ix Indexer) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	informer, err := ix.informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for %T: %w", obj, err)
	}
	index := func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("index %s: %T is not an object", field, raw)
		}
		ns := o.GetNamespace()
		if ix.scope == ClusterWide || ns == "" {
			ns = allNamespaces
		}
		values := extract(o)
		keys := make([]string, len(values))
		for i, v := range values {
			keys[i] = ns + "/" + v
		}
		return keys, nil
	}
	if err := informer.AddIndexers(toolscache.Indexers{fieldIndexPrefix + field: index}); err != nil {
		return fmt.Errorf("index %T by %s: %w", obj, field, err)
	}
	return nil
}

// ErrNoIndexer says an informer has no indexer of its own to look up:
// the informer of a cache of several namespaces (one per namespace).
var ErrNoIndexer = errors.New("the informer has no indexer of its own")

// Lookup returns the objects an index of scope, added by an Indexer to
// informer, holds under value (in namespace ns for a Namespaced index):
// the informer's own objects, not copies, in the form its transform
// stores them. They must only be read. It is for the hot paths that
// would otherwise copy an object to read a few of its fields; on an
// informer without an indexer of its own it fails with ErrNoIndexer, and
// the caller lists instead.
func Lookup(informer cache.Informer, scope Scope, field, ns, value string) ([]any, error) {
	si, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, fmt.Errorf("index %s of %T: %w", field, informer, ErrNoIndexer)
	}
	if scope == ClusterWide || ns == "" {
		ns = allNamespaces
	}
	objs, err := si.GetIndexer().ByIndex(fieldIndexPrefix+field, ns+"/"+value)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", field, err)
	}
	return objs, nil
}
