package rightsizing

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The workers kept for rollbacks: a second controller, fed only by harm
// signals, runs the same reconciler on workers of its own. So a harm
// signal never waits for an apply worker to finish its pass. Both
// controllers' passes take a lock per recommendation first. One is never
// reconciled by two workers at once, and a harm request that finds its
// recommendation in an apply pass waits for that one pass only.
// docs/leader.md, "Workers and the rollbacks' priority", has the design.

const (
	// DefaultRollbackWorkers is how many workers are kept for the harm
	// signals' requests when Config.RollbackWorkers is zero. With 2 kept,
	// both were busy most of a wave and the harm requests waited for one.
	// With none kept, they wait for an apply worker to finish its pass.
	// docs/leader.md, "Workers and the rollbacks' priority", links the
	// figures.
	DefaultRollbackWorkers = 4
	// NoRollbackWorkers, as Config.RollbackWorkers, keeps no worker for
	// them. A harm signal's request then takes its turn in the one queue,
	// at harmPriority, for the next of the --workers workers to finish.
	NoRollbackWorkers = -1
	// maxHarmWaits bounds the harm requests whose enqueue time is kept
	// for kerf_leader_harm_queue_wait_seconds. Past it a request is not
	// timed, as in a storm of restarts across more workloads than that.
	maxHarmWaits = 1 << 16
)

// passes is what the recommendation controller's two paths share. That
// is the reconciler, the lock per recommendation, the harm requests'
// enqueue times, and the apply path's queue. The rollback path hands its
// later looks back to that queue.
type passes struct {
	r *Reconciler
	// keys is the lock per recommendation both paths take; nil with no
	// workers kept for rollbacks, where the one controller's queue never
	// hands a key to two workers at once.
	keys  *keyLock
	waits *harmWaits

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// newQueue is the apply path's controller.Options.NewQueue: the priority
// queue controller-runtime builds by default. It keeps the queue, so that
// the rollback path can hand its later looks back to it.
func (p *passes) newQueue(log logr.Logger) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
			o.Log = log.WithValues("controller", name)
			o.RateLimiter = rl
		})
		p.mu.Lock()
		p.queue = q
		p.mu.Unlock()
		return q
	}
}

// applyQueue is the apply path's queue, nil before its controller starts.
func (p *passes) applyQueue() workqueue.TypedRateLimitingInterface[reconcile.Request] {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queue
}

// pathReconciler is one path's reconcile.Reconciler: the apply path's,
// or the rollback path's (reserved). With workers kept for rollbacks, the
// apply path takes every request but a harm signal's.
type pathReconciler struct {
	p        *passes
	reserved bool
}

// Reconcile implements reconcile.Reconciler: it waits for the
// recommendation's lock, held by a pass of it in the other path, then
// runs the pass.
//
// The rollback path keeps only the looks that finish what a pass
// started: a restore waiting for its resizes, a watch just started, a
// retry after an error. A later look goes back to the apply path's
// queue, so that it is never queued in both. That is the watch's
// periodic recheck, a backoff's expiry, or an in-place apply's look
// again at pendingPriority.
func (pr pathReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := pr.p
	began := time.Now()
	if p.keys != nil {
		if err := p.keys.lock(ctx, req.NamespacedName); err != nil {
			return reconcile.Result{}, err
		}
		defer p.keys.unlock(req.NamespacedName)
	}
	p.waits.started(req.NamespacedName, time.Since(began))
	if h := p.r.DuringPass; h != nil {
		defer h(req, pr.reserved)()
	}
	res, err := p.r.Reconcile(ctx, req)
	if !pr.reserved || err != nil || res.RequeueAfter == 0 || (res.RequeueAfter <= pendingRequeue && res.Priority == nil) {
		return res, err
	}
	q := p.applyQueue()
	if q == nil {
		return res, nil
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{After: res.RequeueAfter, Priority: res.Priority}, req)
	} else {
		q.AddAfter(req, res.RequeueAfter)
	}
	return ctrl.Result{}, nil
}

// keyLock is a lock per recommendation. An entry lives while a pass holds
// it or waits for it, so there are at most as many as the workers of both
// paths.
type keyLock struct {
	mu   sync.Mutex
	held map[types.NamespacedName]*keyEntry
}

// keyEntry is one recommendation's lock: a one-slot semaphore, and how
// many passes hold it or wait for it.
type keyEntry struct {
	sem  chan struct{}
	refs int
}

func newKeyLock() *keyLock { return &keyLock{held: map[types.NamespacedName]*keyEntry{}} }

// lock takes key's lock, waiting for the pass that holds it; ctx's end
// stops the wait, with its error.
func (l *keyLock) lock(ctx context.Context, key types.NamespacedName) error {
	l.mu.Lock()
	e := l.held[key]
	if e == nil {
		e = &keyEntry{sem: make(chan struct{}, 1)}
		l.held[key] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		l.release(key, e)
		return ctx.Err()
	}
}

// unlock gives key's lock back, removing its entry when no pass waits.
func (l *keyLock) unlock(key types.NamespacedName) {
	l.mu.Lock()
	e := l.held[key]
	l.mu.Unlock()
	<-e.sem
	l.release(key, e)
}

func (l *keyLock) release(key types.NamespacedName, e *keyEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.held, key)
	}
}

// len is how many recommendations have an entry.
func (l *keyLock) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// harmWaits times the harm signals' requests, in either path. It
// observes two histograms:
//   - kerf_leader_harm_queue_wait_seconds: from the enqueue to the start
//     of the recommendation's next pass, its lock taken;
//   - kerf_leader_harm_lock_wait_seconds: the part of it the pass waited
//     for the lock.
type harmWaits struct {
	hist, lockHist prometheus.Observer
	mu             sync.Mutex
	// since is when each recommendation was first enqueued by a harm
	// signal since its last pass started (at most maxHarmWaits).
	since map[types.NamespacedName]time.Time
}

func newHarmWaits(hist, lockHist prometheus.Observer) *harmWaits {
	return &harmWaits{hist: hist, lockHist: lockHist, since: map[types.NamespacedName]time.Time{}}
}

// queued notes reqs enqueued by a harm signal now; one already waiting
// keeps its first time.
func (w *harmWaits) queued(reqs []reconcile.Request) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, req := range reqs {
		if _, ok := w.since[req.NamespacedName]; !ok && len(w.since) < maxHarmWaits {
			w.since[req.NamespacedName] = now
		}
	}
}

// started observes, as a pass of key starts, the wait of key's harm
// request, if one waited. It observes locked too: how long the pass
// waited for key's lock.
func (w *harmWaits) started(key types.NamespacedName, locked time.Duration) {
	w.mu.Lock()
	at, ok := w.since[key]
	delete(w.since, key)
	w.mu.Unlock()
	if ok {
		w.hist.Observe(time.Since(at).Seconds())
		w.lockHist.Observe(locked.Seconds())
	}
}

// harmAdder enqueues a harm signal's requests on a controller's queue at
// harmPriority, timing their wait. The priority matters only in the apply
// path's queue, shared with every other request.
func harmAdder(w *harmWaits) func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
	return func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		if len(reqs) == 0 {
			return
		}
		w.queued(reqs)
		addAt(q, harmPriority, reqs)
	}
}
