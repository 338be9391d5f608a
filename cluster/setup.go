package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Field indexes of the leader's cache.
const (
	// targetRefIndex indexes recommendations by the workload their
	// spec.targetRef names, as targetKey (within their namespace).
	targetRefIndex = "spec.targetRef"
)

// targetKey is a recommendation's targetRefIndex key: "Kind/name".
func targetKey(kind v1alpha1.WorkloadKind, name string) string { return string(kind) + "/" + name }

// SetupWithManager registers the recommendation controller with mgr: the
// controller's contract in one place. It reconciles a recommendation when
// it changes; when a policy changes, every recommendation in its scope (a
// RightsizingPolicy's namespace, a ClusterRightsizingPolicy's cluster); and
// when a pod changes or sig signals a pod (an agent's OOM kill, container
// event or counters: docs/design.md section 3, a breach is acted on as soon
// as the signal arrives), the one recommendation whose targetRef names the
// pod's workload. A pod of a workload without a recommendation reconciles
// nothing.
func (r *RecommendationReconciler) SetupWithManager(mgr ctrl.Manager, sig *signals.Stores) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	// Pods by UID: the pod an agent's signal is about, for the stream and
	// for signaled.
	if err := stream.IndexPodsByUID(ctx, idx); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.RightsizingRecommendation{}, targetRefIndex, func(o client.Object) []string {
		ref := o.(*v1alpha1.RightsizingRecommendation).Spec.TargetRef
		return []string{targetKey(ref.Kind, ref.Name)}
	}); err != nil {
		return fmt.Errorf("index recommendations by targetRef: %w", err)
	}
	m := mapper{c: mgr.GetClient(), r: r}
	signaled := make(chan event.GenericEvent, 4096)
	cancel := sig.Subscribe(func(s signals.Signal) {
		select {
		case signaled <- event.GenericEvent{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: s.PodUID}}}:
		default: // full: the watch's periodic look catches up
		}
	})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		cancel()
		return nil
	})); err != nil {
		return fmt.Errorf("unsubscribe from the signals on stop: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RightsizingRecommendation{}).
		Watches(&v1alpha1.RightsizingPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		Watches(&v1alpha1.ClusterRightsizingPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		// A pod status update is a health signal: act on it at once.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(m.pod)).
		WatchesRawSource(source.Channel(signaled, handler.EnqueueRequestsFromMapFunc(m.signaled))).
		// Replicas in one process (tests) each build this controller.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build recommendation controller: %w", err)
	}
	return nil
}

// mapper maps the objects the controller watches to the recommendations
// they concern, reading the manager's cache.
type mapper struct {
	c client.Reader
	r *RecommendationReconciler
}

// inScope maps a policy to every recommendation in its scope: a namespaced
// policy's namespace, or, for a cluster policy (no namespace), every
// namespace.
func (m mapper) inScope(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.RightsizingRecommendationList
	if err := m.c.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		m.r.Log.Error("list recommendations for a policy change", "policy", o.GetName(), "namespace", o.GetNamespace(), "err", err)
		return nil
	}
	return requests(list.Items)
}

// pod maps a pod to the recommendation whose targetRef names its workload
// (Pod → ReplicaSet → Deployment, or its StatefulSet or DaemonSet).
func (m mapper) pod(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	ref, ok, err := workload.Of(ctx, m.c, pod)
	if err != nil {
		// A ReplicaSet the cache has not seen yet: the watch's periodic
		// look catches up.
		m.r.Log.Debug("the workload of a pod", "pod", pod.Name, "namespace", pod.Namespace, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	var list v1alpha1.RightsizingRecommendationList
	if err := m.c.List(ctx, &list, client.InNamespace(ref.Namespace), client.MatchingFields{targetRefIndex: targetKey(ref.Kind, ref.Name)}); err != nil {
		m.r.Log.Error("list the recommendations of a workload", "workload", ref.String(), "namespace", ref.Namespace, "err", err)
		return nil
	}
	var out []v1alpha1.RightsizingRecommendation
	for _, rsr := range list.Items {
		if ref.Targets(rsr.Namespace, rsr.Spec.TargetRef) {
			out = append(out, rsr)
		}
	}
	return requests(out)
}

// signaled maps an agent's signal, a pod known by UID only, to the pod in
// the cache and then as pod does.
func (m mapper) signaled(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := stream.CachedPods{Reader: m.c}.PodByUID(o.GetUID())
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
