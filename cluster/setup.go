package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
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

// Priorities of the controller's queue (controller-runtime's priority
// queue: a higher one is handed to a worker first; within one priority,
// first in first out).
const (
	// harmPriority is a request caused by a harm signal: an agent's OOM
	// kill or container restart, a pod status showing a new restart or
	// termination, when no worker is kept for rollbacks (those have a
	// controller of their own). Its rollback never waits behind the
	// applies queued before it, only for a worker to finish the pass it
	// runs.
	harmPriority = 100
	// pendingPriority is the look again at a change whose pods' in-place
	// resizes were still in flight: finishing what was started (recording
	// it Applied, so that its watch starts) goes before starting the
	// queued applies.
	pendingPriority = 50
	// DefaultWorkers is how many recommendations the leader reconciles at
	// once when Config.Workers is zero.
	DefaultWorkers = 8
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
// nothing. r.Workers workers reconcile at once; a harm signal's request
// goes to a controller of its own, run by r.RollbackWorkers workers kept
// for it, or, with none kept, before every other queued (harmPriority).
// Both controllers run r, a recommendation never in two passes at once
// (docs/leader.md, "Workers and the rollbacks' priority").
func (r *RecommendationReconciler) SetupWithManager(mgr ctrl.Manager, sig *signals.Stores) error {
	ctx := context.Background()
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
	// kill needs: a full channel drops, and the watch's periodic look
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
		// A pod status update is a health signal: act on it at once, and
		// first when it shows a restart or a termination.
		Watches(&corev1.Pod{}, podHandler{m: m, harm: applyHarm}).
		WatchesRawSource(source.Channel(counters, handler.EnqueueRequestsFromMapFunc(releasing(m.signaled))))
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

// signalEvent is the event a signal about a pod puts on its channel: the
// pod's UID alone, which is all m.signaled reads, in the smallest object
// that carries it (a PartialObjectMetadata, 264 bytes; a corev1.Pod is
// 1,240, and up to 8,192 events wait in the channels at scale:
// docs/performance.md), taken from signalObjects.
func signalEvent(uid types.UID) event.GenericEvent {
	o := signalObjects.Get().(*metav1.PartialObjectMetadata)
	o.UID = uid
	return event.GenericEvent{Object: o}
}

// signalObjects are the signal events' objects, used again: at 25,000
// workloads the agents' counters are 3,500 signals a second, 6 % of what
// the leader allocated (docs/performance.md, "The tenth round"). An
// object comes back once the channel refused its event or its one
// handler read it (releasing).
var signalObjects = sync.Pool{New: func() any { return new(metav1.PartialObjectMetadata) }}

// releaseSignalEvent gives a signal event's object back to signalObjects.
func releaseSignalEvent(o client.Object) {
	if p, ok := o.(*metav1.PartialObjectMetadata); ok {
		*p = metav1.PartialObjectMetadata{}
		signalObjects.Put(p)
	}
}

// releasing is fn giving the signal event's object back once it has read
// it: a signal channel's events have one handler, and fn (m.signaled)
// keeps nothing of the object.
func releasing(fn handler.MapFunc) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		reqs := fn(ctx, o)
		releaseSignalEvent(o)
		return reqs
	}
}

// harm reports whether a signal of kind is a harm signal, whose requests
// go first (harmPriority): an OOM kill or a container event (a restart, a
// termination). Counter samples are not: every pod sends them all the
// time, and throttling is judged over a window.
func harm(kind signals.SignalKind) bool {
	return kind == signals.SignalOOMKill || kind == signals.SignalContainerEvent
}

// enqueueWith enqueues, for a channel source's generic events, the
// requests fn maps an event to, with add.
func enqueueWith(add func(workqueue.TypedRateLimitingInterface[reconcile.Request], []reconcile.Request), fn handler.MapFunc) handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, fn(ctx, e.Object))
		},
	}
}

// addAt adds reqs to q at priority. An item already queued at a lower
// priority moves up to it, behind the items already at it.
func addAt(q workqueue.TypedRateLimitingInterface[reconcile.Request], priority int, reqs []reconcile.Request) {
	if len(reqs) == 0 {
		return
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, reqs...)
		return
	}
	for _, req := range reqs {
		q.Add(req)
	}
}

// podHandler enqueues the recommendation of a pod's workload (mapper.pod)
// as handler.EnqueueRequestsFromMapFunc does (low priority for the
// informer's initial list and its resyncs), but with harm (harmAdder: at
// harmPriority) when an update shows harm (podHarmed). A nil harm leaves
// those updates to the rollbacks' controller; harmOnly (that controller's
// handler) enqueues nothing else.
type podHandler struct {
	m        mapper
	harm     func(workqueue.TypedRateLimitingInterface[reconcile.Request], []reconcile.Request)
	harmOnly bool
}

// Create implements handler.EventHandler.
func (h podHandler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !h.harmOnly {
		h.delegate().Create(ctx, e, q)
	}
}

// Update implements handler.EventHandler.
func (h podHandler) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	oldStatus, ok1 := cachestore.PodStatus(e.ObjectOld)
	newStatus, ok2 := cachestore.PodStatus(e.ObjectNew)
	if ok1 && ok2 && podHarmed(&oldStatus, &newStatus) {
		// The workload is the same before and after: a pod's controller
		// does not change.
		if h.harm != nil {
			h.harm(q, h.m.pod(ctx, e.ObjectNew))
		}
		return
	}
	if !h.harmOnly {
		h.delegate().Update(ctx, e, q)
	}
}

// Delete implements handler.EventHandler.
func (h podHandler) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !h.harmOnly {
		h.delegate().Delete(ctx, e, q)
	}
}

// Generic implements handler.EventHandler.
func (h podHandler) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !h.harmOnly {
		h.delegate().Generic(ctx, e, q)
	}
}

func (h podHandler) delegate() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(h.m.pod)
}

// podHarmed reports whether the update from old to cur shows harm: a
// container (init, regular or ephemeral) restarted (its restartCount grew)
// or has a termination old did not show (state or lastState terminated:
// an OOM kill, a crash), which the health watch counts.
func podHarmed(old, cur *corev1.PodStatus) bool {
	for _, statuses := range [][2][]corev1.ContainerStatus{
		{old.InitContainerStatuses, cur.InitContainerStatuses},
		{old.ContainerStatuses, cur.ContainerStatuses},
		{old.EphemeralContainerStatuses, cur.EphemeralContainerStatuses},
	} {
		for i := range statuses[1] {
			cs := &statuses[1][i]
			var was *corev1.ContainerStatus
			for j := range statuses[0] {
				if statuses[0][j].Name == cs.Name {
					was = &statuses[0][j]
					break
				}
			}
			if was == nil {
				if cs.RestartCount > 0 || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
					return true
				}
				continue
			}
			if cs.RestartCount > was.RestartCount ||
				newTermination(was.State.Terminated, cs.State.Terminated) ||
				newTermination(was.LastTerminationState.Terminated, cs.LastTerminationState.Terminated) {
				return true
			}
		}
	}
	return false
}

// newTermination reports whether cur is a termination was is not (another
// run: container ID or finish time).
func newTermination(was, cur *corev1.ContainerStateTerminated) bool {
	if cur == nil {
		return false
	}
	return was == nil || was.ContainerID != cur.ContainerID || !was.FinishedAt.Equal(&cur.FinishedAt)
}

// mapper maps the objects the controller watches to the recommendations
// they concern, reading the manager's cache.
type mapper struct {
	c client.Reader
	// cache is the manager's, and pods, replicaSets and recommendations
	// its informers of them, which signaled and pod read without a copy.
	cache                              *cachestore.Cache
	pods, replicaSets, recommendations cache.Informer
	r                                  *RecommendationReconciler
}

// The kinds the mapper looks up, for their type alone (not written: a
// prototype made for each lookup was 1.2 KB of garbage a signal).
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
// The pod is the informer's (in cachestore's form) or a *corev1.Pod read:
// only its metadata is read.
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

// replicaSet reads a ReplicaSet for workload.OfWith: the cache's own (in
// cachestore's form, only its metadata read), or, in a cache of several
// namespaces (no one indexer), a copy.
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
// the cache and then as pod does. It reads the cache's own object, in
// cachestore's form, through the index (cachestore.Cache.Lookup): a
// signal comes for every pod every counters interval (3,500 a second at
// 35,000 pods and the agents' 10 s), and a copying read made each a whole
// corev1.Pod (15 % of the leader's CPU in a wave at 25,000 workloads,
// docs/performance.md). A cache of several namespaces (--watch-namespaces)
// has no one index to look up: there the pod is read as a copy.
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
