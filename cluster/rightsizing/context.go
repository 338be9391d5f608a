package rightsizing

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// reconcileContext is what one pass over one recommendation works on,
// after Argo Rollouts' rolloutContext. It holds:
//   - the recommendation, the policy that governs it and the clock
//     reading, taken once at the start of the pass;
//   - the workload and its pods, read on first use and never again in
//     the pass.
//
// Every status write of the pass goes through its record.
type reconcileContext struct {
	r *Reconciler
	// rsr is the recommendation; record writes its status.
	rsr *v1alpha1.RightsizingRecommendation
	// resolved is the governing policy, nil when none selects the workload.
	resolved *policy.Resolved
	// now is the pass's one clock reading.
	now time.Time
	// began, breachAsked and breachRecorded are what a rollback logs
	// (restore). began is when the pass began, by the process's own
	// clock; now may be a test's. breachAsked is when it asked for its
	// breach's write, zero in a pass that did not decide the rollback.
	// breachRecorded is how long that write took.
	began          time.Time
	breachAsked    time.Time
	breachRecorded time.Duration
	// rollingBack is set once the pass decides or finishes a rollback:
	// from then on its writes go through the rollbacks' client (writer).
	rollingBack bool
	// releaseGate releases the applies' yield the pass holds while it
	// rolls back (beginRollback); nil when it holds none.
	releaseGate func()
	// canaryNote says why the policy's canary does not apply to the
	// change the pass planned, for its applied message (chooseCanary).
	canaryNote string
	// mirrorPending says a breach's backoff state is not mirrored on the
	// workload yet: its mirror waits for the restore (breach).
	mirrorPending bool

	// The workload and its pods, filled by loadWorkload.
	workloadRead, podsRead bool
	target                 *workload.Workload
	workloadErr            error
	podList                []corev1.Pod
	podsErr                error
}

// newContext reads the recommendation and resolves its policy. It returns
// nil, with no error, when there is nothing to reconcile: the
// recommendation is gone or being deleted.
func (r *Reconciler) newContext(ctx context.Context, req ctrl.Request) (*reconcileContext, error) {
	var rsr v1alpha1.RightsizingRecommendation
	if err := r.Client.Get(ctx, req.NamespacedName, &rsr); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if rsr.DeletionTimestamp != nil {
		return nil, nil
	}
	c := &reconcileContext{r: r, rsr: &rsr, now: r.Now(), began: time.Now()}
	resolved, err := c.resolvePolicy(ctx)
	if err != nil {
		return nil, err
	}
	c.resolved = resolved
	return c, nil
}

// beginRollback marks the pass as rolling back: its writes go through
// the rollbacks' client, and the applies' writes wait for it to end
// (fence.RollbackGate).
func (c *reconcileContext) beginRollback() {
	c.rollingBack = true
	if c.releaseGate == nil {
		c.releaseGate = c.r.Gate.Hold()
	}
}

// endRollback ends what beginRollback began, once the pass's own work is
// done.
func (c *reconcileContext) endRollback() {
	c.rollingBack = false
	if c.releaseGate != nil {
		c.releaseGate()
		c.releaseGate = nil
	}
}

// writer is the client the pass writes with: the rollbacks' once it
// rolls back (Reconciler.RollbackClient), else Client.
func (c *reconcileContext) writer() client.Client {
	if c.rollingBack && c.r.RollbackClient != nil {
		return c.r.RollbackClient
	}
	return c.r.Client
}

// applier is the applier the pass writes with, as writer.
func (c *reconcileContext) applier() *apply.Applier {
	if c.rollingBack && c.r.Rollbacks != nil {
		return c.r.Rollbacks
	}
	return c.r.Applier
}

// resolvePolicy finds the policy that governs the recommendation's
// workload, or nil. A workload that does not exist (yet) is selected by its
// kind, namespace and name alone.
func (c *reconcileContext) resolvePolicy(ctx context.Context) (*policy.Resolved, error) {
	rsr := c.rsr
	pols, err := policy.Gatherer{Reader: c.r.Client}.InNamespace(ctx, rsr.Namespace)
	if err != nil {
		return nil, err
	}
	workload, err := c.workload(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read workload of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	w := policy.Workload{Kind: rsr.Spec.TargetRef.Kind, Namespace: rsr.Namespace, Name: rsr.Spec.TargetRef.Name}
	if workload != nil {
		w.Labels = workload.GetLabels()
	}
	return pols.Resolve(w)
}

// workload returns the recommendation's workload object (see
// loadWorkload).
func (c *reconcileContext) workload(ctx context.Context) (client.Object, error) {
	w, err := c.targetWorkload(ctx)
	if err != nil {
		return nil, err
	}
	return w.Object, nil
}

// targetWorkload returns the recommendation's workload with its template,
// selector and update strategy (see loadWorkload).
func (c *reconcileContext) targetWorkload(ctx context.Context) (*workload.Workload, error) {
	c.loadWorkload(ctx, false)
	return c.target, c.workloadErr
}

// pods returns the pods the workload's selector selects (see
// loadWorkload).
func (c *reconcileContext) pods(ctx context.Context) ([]corev1.Pod, error) {
	c.loadWorkload(ctx, true)
	if c.workloadErr != nil {
		return nil, fmt.Errorf("read workload of %s/%s: %w", c.rsr.Namespace, c.rsr.Name, c.workloadErr)
	}
	return c.podList, c.podsErr
}

// loadWorkload is the one place a pass reads the workload and, when
// withPods, lists its pods. Each is read at most once. The outcome, an
// error too (not found included), is kept for the rest of the pass.
func (c *reconcileContext) loadWorkload(ctx context.Context, withPods bool) {
	if !c.workloadRead {
		c.workloadRead = true
		c.target, c.workloadErr = workload.Get(ctx, c.r.Client, c.rsr.Namespace, c.rsr.Spec.TargetRef)
	}
	if withPods && !c.podsRead && c.workloadErr == nil {
		c.podsRead = true
		c.podList, c.podsErr = workload.Pods(ctx, c.r.Client, c.target)
	}
}

// workloadGone reports whether the workload no longer exists. A restore
// that failed on something not found asks it: the workload may have been
// deleted since the pass read it, and then it is read once more.
func (c *reconcileContext) workloadGone(ctx context.Context, cause error) bool {
	if _, err := c.workload(ctx); apierrors.IsNotFound(err) {
		return true
	}
	if !apierrors.IsNotFound(cause) {
		return false
	}
	c.workloadRead, c.podsRead = false, false
	_, err := c.workload(ctx)
	return apierrors.IsNotFound(err)
}
