package rightsizing

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// pendingRequeue is how soon a change whose in-place resizes are still
// running is looked at again.
const pendingRequeue = 2 * time.Second

// Reconciler is the RightsizingRecommendation controller: it plans a
// change, applies it, watches it and rolls it back on harm.
//
// Each pass resolves the workload's policy, checks the guardrails and
// records the change in status before it makes it run (design section 4).
// It is level-driven: a leader that restarts, or takes over, reads status
// and converges.
type Reconciler struct {
	Client  client.Client
	Applier *apply.Applier
	// RollbackClient and Rollbacks write a rollback: a breach's status,
	// the restore and its record, the workload's mirror. They are Client
	// and Applier on a client budget of their own, which the applies
	// never spend (docs/leader.md, "The clients and their budgets"). Nil
	// means Client and Applier.
	RollbackClient client.Client
	Rollbacks      *apply.Applier
	// Live reads from the apiserver what the leader's cache does not
	// keep: a recommendation's basis beside its refusals annotation
	// (recordRefusals). Nil means the manager's API reader.
	Live     client.Reader
	Recorder events.EventRecorder
	Metrics  *Metrics
	// Kernel gives the agents' OOM kill counts; nil counts only what pod
	// status shows.
	Kernel healthwatch.KernelSource
	// Statuses gives the container restarts and terminations the agents
	// saw before pod status; nil counts only what pod status shows.
	Statuses healthwatch.AgentStatusSource
	// Throttling gives CFS counters; nil leaves throttling not evaluated.
	Throttling healthwatch.ThrottlingSource
	// Gates are the checks a planned change must pass before it is
	// applied; nil checks none.
	Gates *gates.Checker
	// Log is the leader's logger.
	Log *slog.Logger
	// Workers is how many recommendations are reconciled at once (never
	// one twice at once); 0 means DefaultWorkers.
	Workers int
	// RollbackWorkers is how many workers are kept for the harm signals'
	// requests, on a controller of their own (docs/leader.md, "Workers
	// and the rollbacks' priority"); 0 means DefaultRollbackWorkers,
	// NoRollbackWorkers none.
	RollbackWorkers int
	// Now is the clock; tests inject theirs.
	Now func() time.Time
	// AfterRecord, when set, runs after a change is recorded in status and
	// before it is applied; the failover test stops a leader there.
	AfterRecord func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// AfterBreach, when set, runs after a breach is recorded and before
	// the restore; the failover test stops a leader there.
	AfterBreach func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// Gate is the applies' yield to rollbacks: a rollback pass holds it
	// (reconcileContext.beginRollback). Nil means the applies never wait.
	Gate *fence.RollbackGate
	// DuringPass, when set, runs as a pass of req starts, its lock taken,
	// in the rollbacks' path (reserved) or the other; the pass ends after
	// the func it returns (tests only).
	DuringPass func(req ctrl.Request, reserved bool) (done func())
}

// Reconcile is one pass over one recommendation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c, err := r.newContext(ctx, req)
	if c == nil || err != nil {
		if err == nil {
			r.Metrics.setDegraded(req.Namespace, req.Name, false) // gone
		}
		return ctrl.Result{}, err
	}
	defer func() { r.Metrics.setDegraded(req.Namespace, req.Name, c.rsr.Status.Phase == v1alpha1.PhaseDegraded) }()
	res, err := func() (ctrl.Result, error) {
		defer c.endRollback()
		return c.reconcile(ctx)
	}()
	if err == nil {
		// After the pass's own work, so a refusal never delays a rollback.
		err = c.recordRefusals(ctx)
	}
	return res, err
}

// reconcile decides what the recommendation needs next and does it.
func (c *reconcileContext) reconcile(ctx context.Context) (ctrl.Result, error) {
	rsr := c.rsr
	if c.resolved == nil {
		// A rollback already decided is finished first: the policy going
		// away never leaves harmful values running, nor a breach without
		// its change (design section 4).
		if b := rsr.Status.Breach; b != nil && !b.Restored && rsr.Status.Change != nil {
			res, err := c.restore(ctx)
			if err != nil || !rsr.Status.Breach.Restored {
				return res, err
			}
		}
		return ctrl.Result{}, c.noPolicy(ctx)
	}
	// A change recorded but not finished (a leader stopped mid-apply):
	// finish exactly that change.
	if cond := meta.FindStatusCondition(rsr.Status.Conditions, v1alpha1.ConditionApplied); rsr.Status.Change != nil &&
		cond != nil && cond.Status != metav1.ConditionTrue && cond.Reason == v1alpha1.AppliedReasonApplying {
		return c.finish(ctx)
	}
	// A Degraded workload gets nothing new until it is resumed.
	if b := rsr.Status.Breach; b == nil || b.Restored {
		if err := c.resume(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	if res, handled, err := c.health(ctx); handled {
		return res, err
	}
	if res, handled, err := c.degraded(ctx); handled {
		return res, err
	}
	if rsr.Status.ObservedGeneration == rsr.Generation && rsr.Status.Phase != "" &&
		rsr.Status.Phase != v1alpha1.PhasePending && rsr.Status.Phase != v1alpha1.PhaseBlocked && !freshTurn(rsr, c.resolved.Ref.Fingerprint) {
		return ctrl.Result{}, nil // this generation was acted on; the health watch takes it from here
	}
	return c.plan(ctx)
}
