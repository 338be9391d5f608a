package stream

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pods finds pods by UID in the leader's own cache. The stream uses it to
// find the node of the agent's pod and of every pod an agent reports on.
type Pods interface {
	// PodByUID returns the pod with the UID, and false when the cache does
	// not hold it.
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// PodUIDField is the field index of the cache's pods, by metadata.uid, that
// CachedPods reads (IndexPodsByUID adds it).
const PodUIDField = "metadata.uid"

// IndexPodsByUID adds PodUIDField to the pods of a cache that has not
// started yet, so that CachedPods can read it. idx's indexes must answer
// lists across all namespaces, as the leader's do (cachestore.ClusterWide).
func IndexPodsByUID(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, PodUIDField, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return fmt.Errorf("index pods by UID: %w", err)
	}
	return nil
}

// CachedPods is Pods over a controller-runtime cache whose pods
// IndexPodsByUID indexed. In the leader it is the manager's cache, which
// also serves its health watch, so the stream and the watch see the same
// pods.
type CachedPods struct {
	// Reader reads the cache (the manager's client does).
	Reader client.Reader
}

// podLookupTimeout bounds one lookup: a cache read returns at once once
// synced, and waits for the sync before.
const podLookupTimeout = 5 * time.Second

// PodByUID implements Pods. The pod is a copy: the leader's cache holds
// pods in a form of its own (cluster/cachestore/pod.go) that only a
// copying read turns into a *corev1.Pod. Its callers look a pod up once
// per pod, as the stream keeps what it needs of it, and once per harm
// signal.
func (p CachedPods) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), podLookupTimeout)
	defer cancel()
	var pods corev1.PodList
	if err := p.Reader.List(ctx, &pods, client.MatchingFields{PodUIDField: string(uid)}); err != nil || len(pods.Items) == 0 {
		return nil, false
	}
	return &pods.Items[0], true
}
