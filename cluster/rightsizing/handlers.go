package rightsizing

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// signalEvent is the event a signal about a pod puts on its channel: the
// pod's UID alone, which is all m.signaled reads. It carries the UID in
// the smallest object that can, a PartialObjectMetadata taken from
// signalObjects, since thousands of events wait in the channels at scale
// (docs/leader.md, "Reading from the cache: what each cut saved").
func signalEvent(uid types.UID) event.GenericEvent {
	o := signalObjects.Get().(*metav1.PartialObjectMetadata)
	o.UID = uid
	return event.GenericEvent{Object: o}
}

// signalObjects are the signal events' objects, used again. At scale the
// agents' counters make thousands of signals a second (docs/leader.md,
// "Reading from the cache: what each cut saved"). An object comes back
// once the channel refused its event or its one handler read it
// (releasing).
var signalObjects = sync.Pool{New: func() any { return new(metav1.PartialObjectMetadata) }}

// releaseSignalEvent gives a signal event's object back to signalObjects.
func releaseSignalEvent(o client.Object) {
	if p, ok := o.(*metav1.PartialObjectMetadata); ok {
		*p = metav1.PartialObjectMetadata{}
		signalObjects.Put(p)
	}
}

// releasing is fn, giving the signal event's object back once fn has
// read it. A signal channel's events have one handler, and fn
// (m.signaled) keeps nothing of the object.
func releasing(fn handler.MapFunc) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		reqs := fn(ctx, o)
		releaseSignalEvent(o)
		return reqs
	}
}

// harm reports whether a signal of kind is a harm signal, whose requests
// go first (harmPriority). Those are an OOM kill and a container event: a
// restart, a termination. Counter samples are not: every pod sends them
// all the time, and throttling is judged over a window.
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

// podHandler enqueues the recommendation of a pod's workload
// (mapper.pod), as handler.EnqueueRequestsFromMapFunc does. That gives
// the informer's initial list and its resyncs a low priority.
//
// A pod that ends, is deleted or is resized down also enqueues the
// recommendations the NodeHeadroom gate holds back (mapper.nodeFreed).
//
// An update that shows harm (podHarmed) goes through harm instead:
// harmAdder, at harmPriority. A nil harm leaves those updates to the
// rollbacks' controller. With harmOnly, that controller's handler
// enqueues nothing else.
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
	if !h.harmOnly && ok1 && ok2 && (podEnded(&oldStatus, &newStatus) || podShrank(e.ObjectOld, e.ObjectNew, &oldStatus, &newStatus)) {
		// Room on its node: the NodeHeadroom gate's blocks try again.
		addAt(q, 0, h.m.nodeFreed(ctx, e.ObjectNew))
	}
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
		// Room on its node: the NodeHeadroom gate's blocks try again.
		addAt(q, 0, h.m.nodeFreed(ctx, e.Object))
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

// podHarmed reports whether the update from old to cur shows harm that
// the health watch counts. It reads every container: init, regular and
// ephemeral. Harm is a container that restarted, its restartCount grown,
// or one with a termination old did not show: state or lastState
// terminated, by an OOM kill or a crash.
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
