package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// DefaultResizeTimeout is how long an in-place resize may stay Deferred or
// InProgress before it counts as failed, when Applier.ResizeTimeout is 0.
const DefaultResizeTimeout = 2 * time.Minute

// DefaultResizeConcurrency is how many pods/resize writes one Apply or
// Restore has in flight at once when Applier.ResizeConcurrency is 0. One
// pod after another, a 100-replica in-place apply spent its time waiting
// on round trips, not on the client's rate limit (docs/leader.md,
// "Applying: resizes at once").
const DefaultResizeConcurrency = 16

// Errors callers can test for with errors.Is. Errors from the apiserver are
// wrapped as they come, so apierrors.IsConflict and apierrors.IsNotFound
// work on what Plan, Apply and Restore return; a target of another kind
// than Deployment, StatefulSet or DaemonSet is workload.ErrUnsupportedKind.
var (
	// ErrContainerNotFound: the recommendation names a container the pod
	// template does not have.
	ErrContainerNotFound = errors.New("container not in the pod template")
	// ErrInvalidValues: the values would give a container a request above
	// its limit.
	ErrInvalidValues = errors.New("invalid values")
)

// Applier writes recommendation values to workloads, pods and HPAs.
type Applier struct {
	// Client reads and patches workloads, ReplicaSets, pods and HPAs.
	Client client.Client
	// Clientset writes the pods/resize subresource.
	Clientset kubernetes.Interface
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ResizeTimeout is how long an in-place resize may stay Deferred or
	// InProgress before it is a Failure; 0 means DefaultResizeTimeout.
	ResizeTimeout time.Duration
	// ResizeConcurrency is how many pods one Apply or Restore resizes in
	// place at once; 0 (or less) means DefaultResizeConcurrency, 1 one pod
	// after another. The Clientset's rate limiter still bounds the
	// requests: this only stops each resize from waiting for the one
	// before.
	ResizeConcurrency int
}

// Result is what an Apply or Restore did.
type Result struct {
	// Touched are the objects that carry the values: the patched
	// workload, the pods whose spec runs them, the HPA. An object already
	// carrying them is listed as if this call had written it, so calling
	// again with the same inputs reports the same objects.
	Touched []v1alpha1.TouchedObject
	// Failed are the pods whose resize failed for good.
	Failed []Failure
	// Infeasible are the pods of an apply whose resize the kubelet marked
	// Infeasible. The apply is over for them: they keep the values in
	// their spec, not in what runs. The health watch rolls the change
	// back if they stay so past guardrails.rollback.unschedulableGrace. A
	// restore reports such a pod in Left instead.
	Infeasible []Failure
	// Pending are the pods whose resize the kubelet has not finished yet;
	// the caller looks again later.
	Pending []string
	// Notes say what was left alone and why, for events and messages.
	Notes []string
	// Left are the pods a restore could not resize back in place, with
	// Deferred or Rollout on an OnDelete workload: the apiserver or the
	// kubelet refused. They keep the changed values until they are
	// recreated, when the template's come back.
	Left []Failure
	// Annotated says the workload's template patch also wrote the
	// annotations a restore was given; false when no patch was sent (the
	// template held the values already, or the strategy resizes pods).
	Annotated bool
}

// Failure is a pod whose in-place resize failed.
type Failure struct {
	// Pod is the pod's name.
	Pod string
	// Reason is v1alpha1.ResizeInfeasible, ResizeDeferred,
	// ResizeInProgress or ResizeRejected.
	Reason string
	// Message is the kubelet's or apiserver's message.
	Message string
}

func (a *Applier) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

func (a *Applier) resizeConcurrency() int {
	if a.ResizeConcurrency <= 0 {
		return DefaultResizeConcurrency
	}
	return a.ResizeConcurrency
}

func (a *Applier) resizeTimeout() time.Duration {
	if a.ResizeTimeout <= 0 {
		return DefaultResizeTimeout
	}
	return a.ResizeTimeout
}

// Running returns the values workload w runs now, per container of its pod
// template. For the InPlace strategy a value is the one every running pod
// of the workload agrees on, else the template's: in-place resizes and the
// webhook make pods differ from the template. For Rollout and Deferred it
// is the template's. These are the values Plan records as previous, and
// the ones the guardrails compare a recommendation with.
func (a *Applier) Running(ctx context.Context, w *workload.Workload, strategy v1alpha1.Strategy) ([]v1alpha1.ContainerResources, error) {
	return a.currentValues(ctx, w, strategy)
}

// workload reads the recommendation's target.
func (a *Applier) workload(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) (*workload.Workload, error) {
	return workload.Get(ctx, a.Client, rsr.Namespace, rsr.Spec.TargetRef)
}

// currentValues returns the values the workload runs now per template
// container (see Running).
func (a *Applier) currentValues(ctx context.Context, w *workload.Workload, strategy v1alpha1.Strategy) ([]v1alpha1.ContainerResources, error) {
	out := resources.Values(&w.Template.Spec)
	if strategy != v1alpha1.StrategyInPlace {
		return out, nil
	}
	pods, err := workload.RunningPods(ctx, a.Client, w)
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return out, nil
	}
	for i := range out {
		for _, f := range resources.Fields {
			if q, ok := agreedValue(pods, out[i].Name, f); ok {
				f.Set(&out[i].Requests, &out[i].Limits, q)
			}
		}
	}
	return out, nil
}

// agreedValue returns the field's value in the named container, or the
// pod-level one, when every pod has the same. Absent counts as a value.
func agreedValue(pods []corev1.Pod, container string, f resources.Field) (*resource.Quantity, bool) {
	var first *resource.Quantity
	for i := range pods {
		rr, ok := resources.Requirements(&pods[i].Spec, container)
		if !ok {
			return nil, false
		}
		q := f.In(&rr)
		if i == 0 {
			first = q
		} else if !resources.SameQuantity(first, q) {
			return nil, false
		}
	}
	return first, true
}

// Apply makes change.Applied run with the change's strategy and moves the
// coordinated HPA's target. The strategy is the one Plan recorded from the
// recommendation, so a leader finishing an interrupted apply uses what was
// recorded. It returns what carries the values and, for InPlace, the pods
// still resizing and those whose resize failed. A conflict on the workload
// or the HPA is returned (apierrors.IsConflict) for the caller to retry.
func (a *Applier) Apply(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, change *v1alpha1.Change) (*Result, error) {
	if change == nil {
		return nil, errors.New("apply: no change")
	}
	strategy := change.Strategy
	if strategy == "" {
		strategy = rsr.Spec.Strategy
	}
	res := &Result{}
	if err := a.write(ctx, rsr, strategy, appliedTargets(change), change.AppliedAt.Time, false, nil, canaryPods(change), res); err != nil {
		return nil, fmt.Errorf("apply to %s %s/%s: %w", rsr.Spec.TargetRef.Kind, rsr.Namespace, rsr.Spec.TargetRef.Name, err)
	}
	switch {
	case change.HPA != nil:
		if err := a.moveHPA(ctx, rsr, change.HPA.Name, change.HPA.PreviousTargetCPUUtilization, change.HPA.AppliedTargetCPUUtilization, res); err != nil {
			return nil, err
		}
	case coordinates(rsr) && changesCPURequests(change):
		if note, err := a.whyNoHPA(ctx, rsr); err != nil {
			return nil, err
		} else if note != "" {
			res.Notes = append(res.Notes, note)
		}
	}
	return res, nil
}

// Restore puts values back with the strategy that applied the change, per
// container and only for the given resources. Each strategy restores so
// (docs/design.md section 4):
//   - InPlace resizes the pods back.
//   - Rollout and Deferred patch the pod template back.
//   - Deferred, and Rollout on an OnDelete workload, also resize back the
//     pods that started with the values. Those that cannot be are in
//     Result.Left.
//
// Only the fields the change applied are written. A field absent from
// values is removed from the template, since it had no value before; a
// resize leaves it, since Kubernetes cannot remove a value in place. A
// container absent from values is left alone. The coordinated HPA's
// target goes back to its previous value when cpu is restored.
//
// annotations are written on the workload in the template's patch, when
// one is sent (Result.Annotated); a nil value removes one. They are the
// caller's kerf.dev/rollback-state mirror, which so costs no write of its
// own.
func (a *Applier) Restore(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, change *v1alpha1.Change, values []v1alpha1.ContainerResources, resources []v1alpha1.ResourceName, annotations map[string]*string) (*Result, error) {
	if change == nil {
		return nil, errors.New("restore: no change")
	}
	strategy := change.Strategy
	if strategy == "" {
		strategy = rsr.Spec.Strategy
	}
	res := &Result{}
	if err := a.write(ctx, rsr, strategy, restoreTargets(change, values, resources), time.Time{}, true, annotations, canaryPods(change), res); err != nil {
		return nil, fmt.Errorf("restore %s %s/%s: %w", rsr.Spec.TargetRef.Kind, rsr.Namespace, rsr.Spec.TargetRef.Name, err)
	}
	if change.HPA != nil && slices.Contains(resources, v1alpha1.ResourceCPU) {
		if err := a.moveHPA(ctx, rsr, change.HPA.Name, change.HPA.AppliedTargetCPUUtilization, change.HPA.PreviousTargetCPUUtilization, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// write makes the targets run on the workload with the strategy. since is
// the earliest time a resize could have started (the change's appliedAt),
// zero when unknown. restore says the call undoes a change: Deferred then
// patches the template back whatever the update strategy, and Deferred, or
// Rollout on an OnDelete workload, resizes back the pods that started with
// the values. annotations are written with a template patch
// (patchTemplate). only, when not nil, are the pods an InPlace write
// resizes (canaryPods); the others are left alone.
func (a *Applier) write(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, strategy v1alpha1.Strategy, targets []target, since time.Time, restore bool, annotations map[string]*string, only []string, res *Result) error {
	w, err := a.workload(ctx, rsr)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return nil
	}
	switch strategy {
	case v1alpha1.StrategyInPlace:
		return a.resizePods(ctx, w, targets, since, !restore, only, res)
	case v1alpha1.StrategyRollout:
		if err := a.patchTemplate(ctx, w, targets, annotations, res); err != nil {
			return err
		}
		if restore && w.OnDelete() {
			// Nothing replaces the pods that started from the changed
			// template.
			return a.resizeBack(ctx, w, targets, since, res)
		}
		return nil
	case v1alpha1.StrategyDeferred:
		if restore {
			if err := a.patchTemplate(ctx, w, targets, annotations, res); err != nil {
				return err
			}
			return a.resizeBack(ctx, w, targets, since, res)
		}
		if w.OnDelete() {
			return a.patchTemplate(ctx, w, targets, annotations, res)
		}
		res.Notes = append(res.Notes, fmt.Sprintf("pod template of %s %s left as is: with strategy Deferred the admission webhook gives new pods the values", w.Kind, w.Object.GetName()))
		return nil
	default:
		return fmt.Errorf("unknown strategy %q (InPlace, Rollout or Deferred)", strategy)
	}
}

// resizeBack resizes back in place the running pods that run other values
// than the targets. These are:
//   - with Deferred, the pods the webhook gave the changed values to when
//     they started;
//   - with Rollout on an OnDelete workload, the pods that started from the
//     changed template.
//
// Nothing else would change them: the template never had the values, or
// nothing rolls it out. And an OOM-killed container restarts with its
// pod's limits. A pod whose resize is refused for good goes to res.Left:
// a change of QoS class, Infeasible, or a resize that stays Deferred or
// InProgress past ResizeTimeout. It keeps the values until it is
// recreated, and the caller says so.
func (a *Applier) resizeBack(ctx context.Context, w *workload.Workload, targets []target, since time.Time, res *Result) error {
	pods := &Result{}
	if err := a.resizePods(ctx, w, targets, since, false, nil, pods); err != nil {
		return err
	}
	res.Touched = append(res.Touched, pods.Touched...)
	res.Pending = append(res.Pending, pods.Pending...)
	res.Notes = append(res.Notes, pods.Notes...)
	res.Left = append(res.Left, pods.Failed...)
	return nil
}

// canaryPods are the only pods an InPlace apply or restore of change
// resizes. They are its canary pods until the canary is promoted; nil
// (every pod) after, or without a canary (docs/health.md, "Canary").
func canaryPods(change *v1alpha1.Change) []string {
	if change.Promoted() || change.Strategy != v1alpha1.StrategyInPlace {
		return nil
	}
	return change.Canary.Pods
}

// coordinates reports whether the recommendation asks for HPA coordination.
func coordinates(rsr *v1alpha1.RightsizingRecommendation) bool {
	return rsr.Spec.HPA != nil && rsr.Spec.HPA.Coordinate
}

// changesCPURequests reports whether the change sets a cpu request.
func changesCPURequests(change *v1alpha1.Change) bool {
	for _, cc := range change.Containers {
		if cc.Applied.Requests != nil && cc.Applied.Requests.CPU != nil {
			return true
		}
	}
	return false
}
