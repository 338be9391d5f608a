package stream

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Pods finds pods by UID in the leader's own cache; the stream uses it to
// find the node of the agent's pod and of every pod an agent reports on.
type Pods interface {
	// PodByUID returns the pod with the UID, and false when the cache does
	// not hold it.
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// uidIndex names the pod informer index by metadata.uid.
const uidIndex = "kerf.dev/pod-uid"

// PodIndex is Pods over a client-go pod informer.
type PodIndex struct {
	indexer cache.Indexer
}

// NewPodIndex adds an index by UID to a pod informer that has not started
// yet and returns Pods that read it.
func NewPodIndex(informer cache.SharedIndexInformer) (*PodIndex, error) {
	err := informer.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		return []string{string(pod.UID)}, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("add pod UID index: %w", err)
	}
	return &PodIndex{indexer: informer.GetIndexer()}, nil
}

// PodByUID implements Pods.
func (p *PodIndex) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	objs, err := p.indexer.ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}
