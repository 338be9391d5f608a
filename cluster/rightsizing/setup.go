package rightsizing

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/gates"
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

// Priorities of the controller's queue, controller-runtime's priority
// queue. A higher one is handed to a worker first; within one priority,
// first in, first out.
const (
	// harmPriority is a request caused by a harm signal, when no worker
	// is kept for rollbacks; those have a controller of their own. A harm
	// signal is an agent's OOM kill or container restart, or a pod status
	// showing a new restart or termination. Its rollback never waits
	// behind the applies queued before it, only for a worker to finish
	// the pass it runs.
	harmPriority = 100
	// pendingPriority is the look again at a change whose pods' in-place
	// resizes were still in flight. Finishing what was started goes
	// before starting the queued applies: it is recorded Applied, and its
	// watch starts.
	pendingPriority = 50
	// DefaultWorkers is how many recommendations the leader reconciles at
	// once when Config.Workers is zero.
	DefaultWorkers = 8
)

// targetKey is a recommendation's targetRefIndex key: "Kind/name".
func targetKey(kind v1alpha1.WorkloadKind, name string) string { return string(kind) + "/" + name }

// SetupWithManager registers the recommendation controller with mgr: the
// controller's contract in one place. It reconciles:
//   - a recommendation, when it changes;
//   - every recommendation in a policy's scope, when the policy changes:
//     a RightsizingPolicy's or RollbackPolicy's namespace, a
//     ClusterRightsizingPolicy's or ClusterRollbackPolicy's cluster;
//   - a recommendation a gate holds back (cluster/gates), when its
//     workload, a LimitRange, ResourceQuota or PodDisruptionBudget of its
//     namespace, a Node's allocatable or a pod on its node changes;
//   - the one recommendation whose targetRef names a pod's workload, when
//     the pod changes or sig signals it. A signal is an agent's OOM kill,
//     container event or counters. A breach is acted on as soon as the
//     signal arrives (docs/design.md section 3);
//   - the recommendations a gate holds back (cluster/gates), when its
//     object changes: a namespace's ResourceQuota or PodDisruptionBudget,
//     a Node's allocatable, a pod that ends or is deleted (NodeHeadroom).
//
// A pod of a workload without a recommendation reconciles nothing.
// r.Workers workers reconcile at once. A harm signal's request goes to a
// controller of its own, run by r.RollbackWorkers workers kept for it.
// With none kept, it goes before every other queued request
// (harmPriority). Both controllers run r, and a recommendation is never
// in two passes at once (docs/leader.md, "Workers and the rollbacks'
// priority").
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, sig *signals.Stores) error {
	ctx := context.Background()
	if r.Live == nil {
		r.Live = mgr.GetAPIReader()
	}
	// Every index keeps an object under its value's bucket, one key an
	// object (the leader's cache is a cachestore.Cache): pods by UID are
	// looked up across all namespaces, the rest in the workload's
	// namespace.
	ic, ok := mgr.GetCache().(*cachestore.Cache)
	if !ok {
		return fmt.Errorf("recommendation controller: the manager's cache is a %T, not a cachestore.Cache (ctrl.Options.NewCache: cachestore.NewCache)", mgr.GetCache())
	}
	idx := ic.Indexer(cachestore.Namespaced)
	// Pods by UID: the pod an agent's signal is about, for the stream and
	// for signaled.
	if err := stream.IndexPodsByUID(ctx, ic.Indexer(cachestore.ClusterWide)); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.RightsizingRecommendation{}, targetRefIndex, func(o client.Object) []string {
		ref := o.(*v1alpha1.RightsizingRecommendation).Spec.TargetRef
		return []string{targetKey(ref.Kind, ref.Name)}
	}); err != nil {
		return fmt.Errorf("index recommendations by targetRef: %w", err)
	}
	if err := workload.IndexFields(ctx, idx); err != nil {
		return err
	}
	// The gates' reads: a node's pods (NodeHeadroom), and the
	// recommendations a gate holds back, for the watches that try them
	// again.
	if err := ic.Indexer(cachestore.ClusterWide).IndexField(ctx, &corev1.Pod{}, gates.NodeNameField, func(o client.Object) []string {
		if n, _ := cachestore.PodNodeName(o); n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	if err := ic.Indexer(cachestore.ClusterWide).IndexField(ctx, &v1alpha1.RightsizingRecommendation{}, blockedReasonIndex, blockedReason); err != nil {
		return fmt.Errorf("index recommendations by the reason they are blocked: %w", err)
	}
	pods, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for pods: %w", err)
	}
	replicaSets, err := mgr.GetCache().GetInformer(ctx, &appsv1.ReplicaSet{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for ReplicaSets: %w", err)
	}
	recs, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.RightsizingRecommendation{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for recommendations: %w", err)
	}
	m := mapper{c: mgr.GetClient(), cache: ic, pods: pods, replicaSets: replicaSets, recommendations: recs, r: r}
	// Harm signals and counter samples come on channels of their own, so
	// that counters (every pod, every interval) never fill the one an OOM
	// kill needs. A full channel drops, and the watch's periodic look
	// catches up.
	harmful := make(chan event.GenericEvent, 4096)
	counters := make(chan event.GenericEvent, 4096)
	cancel := sig.Subscribe(func(s signals.Signal) {
		ch := counters
		if harm(s.Kind) {
			ch = harmful
		}
		e := signalEvent(s.PodUID)
		select {
		case ch <- e:
		default:
			releaseSignalEvent(e.Object)
		}
	})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		cancel()
		return nil
	})); err != nil {
		return fmt.Errorf("unsubscribe from the signals on stop: %w", err)
	}
	workers := r.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	if workers < 1 {
		return fmt.Errorf("recommendation controller: workers is %d, want at least 1", workers)
	}
	rollbackWorkers := r.RollbackWorkers
	switch {
	case rollbackWorkers == 0:
		rollbackWorkers = DefaultRollbackWorkers
	case rollbackWorkers == NoRollbackWorkers:
		rollbackWorkers = 0
	case rollbackWorkers < 0:
		return fmt.Errorf("recommendation controller: rollback workers is %d, want at least 0, or NoRollbackWorkers", rollbackWorkers)
	}
	if r.Metrics == nil {
		return fmt.Errorf("recommendation controller: no metrics (the harm requests' waits are kerf_leader_harm_queue_wait_seconds)")
	}
	p := &passes{r: r, waits: newHarmWaits(r.Metrics.HarmQueueWait, r.Metrics.HarmLockWait)}
	if rollbackWorkers > 0 {
		p.keys = newKeyLock()
	}
	harmAdd := harmAdder(p.waits)
	// With workers kept for rollbacks, the harm signals feed their
	// controller only; without, the one controller at harmPriority.
	applyHarm := harmAdd
	if rollbackWorkers > 0 {
		applyHarm = nil
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RightsizingRecommendation{}).
		Watches(&v1alpha1.RightsizingPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		Watches(&v1alpha1.ClusterRightsizingPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		Watches(&v1alpha1.RollbackPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		Watches(&v1alpha1.ClusterRollbackPolicy{}, handler.EnqueueRequestsFromMapFunc(m.inScope)).
		// A pod status update is a health signal: act on it at once, and
		// first when it shows a restart or a termination.
		Watches(&corev1.Pod{}, podHandler{m: m, harm: applyHarm}).
		WatchesRawSource(source.Channel(counters, handler.EnqueueRequestsFromMapFunc(releasing(m.signaled)))).
		// The gating objects: a change to one tries again the changes its
		// gate holds back (cluster/gates), and those a gate could not
		// evaluate (a quota not yet counted). A pod that ends frees room
		// on its node (podHandler).
		Watches(&corev1.ResourceQuota{}, handler.EnqueueRequestsFromMapFunc(m.blockedBy(v1alpha1.ReasonResourceQuota, v1alpha1.ReasonGateUnavailable))).
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(m.blockedBy(v1alpha1.ReasonDisruptionBudget, v1alpha1.ReasonGateUnavailable))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(m.nodeFreed), builder.WithPredicates(allocatableChanged)).
		// The gates' objects: a change to one tries again what its gate
		// holds back (cluster/gates).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(m.rolledOut(v1alpha1.KindDeployment))).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(m.rolledOut(v1alpha1.KindStatefulSet))).
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(m.rolledOut(v1alpha1.KindDaemonSet))).
		Watches(&corev1.LimitRange{}, handler.EnqueueRequestsFromMapFunc(m.blockedBy(v1alpha1.ReasonLimitRange)))
	if rollbackWorkers == 0 {
		b = b.WatchesRawSource(source.Channel(harmful, enqueueWith(harmAdd, releasing(m.signaled))))
	}
	err = b.WithOptions(controller.Options{
		// Replicas in one process (tests) each build this controller.
		SkipNameValidation: ptr.To(true),
		// controller-runtime's priority queue, kept for the rollback
		// path to hand its later looks back to; the rollbacks' priority
		// needs it.
		UsePriorityQueue: ptr.To(true),
		NewQueue:         p.newQueue(mgr.GetLogger()),
		// A key never runs in two workers at once (the queue's guarantee
		// within this controller, the key lock across both); what the
		// passes share is safe for concurrent use (docs/leader.md,
		// "Workers and the rollbacks' priority").
		MaxConcurrentReconciles: workers,
	}).Complete(pathReconciler{p: p})
	if err != nil {
		return fmt.Errorf("build recommendation controller: %w", err)
	}
	if rollbackWorkers == 0 {
		return nil
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("rightsizingrecommendation-rollbacks").
		Watches(&corev1.Pod{}, podHandler{m: m, harm: harmAdd, harmOnly: true}).
		WatchesRawSource(source.Channel(harmful, enqueueWith(harmAdd, releasing(m.signaled)))).
		WithOptions(controller.Options{
			SkipNameValidation:      ptr.To(true),
			UsePriorityQueue:        ptr.To(true),
			MaxConcurrentReconciles: rollbackWorkers,
		}).
		Complete(pathReconciler{p: p, reserved: true})
	if err != nil {
		return fmt.Errorf("build recommendation rollbacks' controller: %w", err)
	}
	return nil
}
