package rightsizing

import (
	"context"
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// mapper maps the objects the controller watches to the recommendations
// they concern, reading the manager's cache.
type mapper struct {
	c client.Reader
	// cache is the manager's, and pods, replicaSets and recommendations
	// its informers of them, which signaled and pod read without a copy.
	cache                              *cachestore.Cache
	pods, replicaSets, recommendations cache.Informer
	r                                  *Reconciler
}

// The kinds the mapper looks up, for their type alone. They are never
// written. One made for each lookup was garbage on every signal
// (docs/leader.md, "Reading from the cache: what each cut saved").
var (
	podKind            = &corev1.Pod{}
	recommendationKind = &v1alpha1.RightsizingRecommendation{}
)

// inScope maps a policy to every recommendation in its scope: a namespaced
// policy's namespace, or, for a cluster policy (no namespace), every
// namespace.
func (m mapper) inScope(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.RightsizingRecommendationList
	// Only their keys are read: the cache's objects, not copies.
	if err := m.c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		m.r.Log.Error("list recommendations for a policy change", "policy", o.GetName(), "namespace", o.GetNamespace(), "err", err)
		return nil
	}
	return requests(list.Items)
}

// pod maps a pod to the recommendation whose targetRef names its workload
// (Pod → ReplicaSet → Deployment, or its StatefulSet or DaemonSet).
// The pod is the informer's (a cachedPod) or a *corev1.Pod read: only its
// metadata is read.
func (m mapper) pod(ctx context.Context, pod client.Object) []reconcile.Request {
	if _, ok := cachestore.PodStatus(pod); !ok {
		return nil
	}
	ref, ok, err := workload.OfWith(ctx, pod, m.replicaSet)
	if err != nil {
		// A ReplicaSet the cache has not seen yet: the watch's periodic
		// look catches up.
		m.r.Log.Debug("the workload of a pod", "pod", pod.GetName(), "namespace", pod.GetNamespace(), "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	var out []reconcile.Request
	target := func(rsr *v1alpha1.RightsizingRecommendation) {
		if ref.Targets(rsr.Namespace, rsr.Spec.TargetRef) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rsr)})
		}
	}
	// The cache's own recommendations, only read: neither a list nor a
	// copy for each agent's sample.
	objs, err := m.cache.Lookup(m.recommendations, recommendationKind, targetRefIndex, ref.Namespace, targetKey(ref.Kind, ref.Name))
	if errors.Is(err, cachestore.ErrNoIndexer) {
		var list v1alpha1.RightsizingRecommendationList
		if err := m.c.List(ctx, &list, client.InNamespace(ref.Namespace), client.MatchingFields{targetRefIndex: targetKey(ref.Kind, ref.Name)},
			client.UnsafeDisableDeepCopy); err != nil {
			m.r.Log.Error("list the recommendations of a workload", "workload", ref.String(), "namespace", ref.Namespace, "err", err)
			return nil
		}
		for i := range list.Items {
			target(&list.Items[i])
		}
		return out
	}
	if err != nil {
		m.r.Log.Error("look up the recommendations of a workload", "workload", ref.String(), "namespace", ref.Namespace, "err", err)
		return nil
	}
	for _, o := range objs {
		if rsr, ok := o.(*v1alpha1.RightsizingRecommendation); ok {
			target(rsr)
		}
	}
	return out
}

// replicaSet reads a ReplicaSet for workload.OfWith. It reads the cache's
// own object, a cachedReplicaSet, and only its metadata. A cache of
// several namespaces has no one indexer; there it reads a copy.
func (m mapper) replicaSet(ctx context.Context, key client.ObjectKey) (metav1.Object, error) {
	if m.replicaSets != nil {
		obj, ok, err := cachestore.Stored(m.replicaSets, key.Namespace, key.Name)
		switch {
		case err == nil && ok:
			return obj, nil
		case err == nil:
			return nil, apierrors.NewNotFound(appsv1.Resource("replicasets"), key.Name)
		case !errors.Is(err, cachestore.ErrNoIndexer):
			return nil, err
		}
	}
	return workload.ReplicaSetsOf(m.c)(ctx, key)
}

// signaled maps an agent's signal, a pod known by UID only, to the pod in
// the cache and then as pod does. It reads the cache's own object, the
// cachedPod, through the index (cachestore.Cache.Lookup). A signal comes
// for every pod every counters interval, and a copying read made each a
// whole corev1.Pod (docs/leader.md, "Reading from the cache: what each
// cut saved"). A cache of several namespaces (--watch-namespaces) has no
// one index to look up: there the pod is read as a copy.
func (m mapper) signaled(ctx context.Context, o client.Object) []reconcile.Request {
	objs, err := m.cache.Lookup(m.pods, podKind, stream.PodUIDField, "", string(o.GetUID()))
	if errors.Is(err, cachestore.ErrNoIndexer) {
		pod, ok := stream.CachedPods{Reader: m.c}.PodByUID(o.GetUID())
		if !ok {
			return nil
		}
		return m.pod(ctx, pod)
	}
	if err != nil || len(objs) == 0 {
		return nil
	}
	pod, ok := objs[0].(client.Object)
	if !ok {
		return nil
	}
	return m.pod(ctx, pod)
}

// requests returns a request per recommendation.
func requests(items []v1alpha1.RightsizingRecommendation) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(items))
	for i := range items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&items[i])})
	}
	return out
}
