package gates

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// quotaResources are the quota resources a change of CPU and memory
// values moves. The apiserver's ResourceQuota admission charges a pod so
// (k8s.io/kubernetes/pkg/quota/v1/evaluator/core, PodUsageFunc); cpu and
// memory are the requests under their short names.
var quotaResources = []corev1.ResourceName{
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory,
	corev1.ResourceCPU, corev1.ResourceMemory,
	corev1.ResourcePods, podCount,
}

// podCount is the object count quota of pods. With pods, it is what a
// Rollout's surge pods add.
const podCount = corev1.ResourceName("count/pods")

// ResourceQuota refuses a change a ResourceQuota of the workload's
// namespace has no room for. What the change adds to the quota's usage:
//   - InPlace: the sum, over the pods that have not ended, of the pod's
//     charge with the applied values less its charge now;
//   - Rollout and Deferred: what the rolling update adds at its peak
//     (rolloutPeak); for a Rollout, its maxSurge pods too.
//
// A quota charges the pod by its scopes as quota admission matches them
// (quotaMatches); the leader's cache keeps what they read of a pod (its
// priority class, an affinity that names other namespaces).
type ResourceQuota struct {
	// Reader reads the namespace's ResourceQuotas (the leader's cache).
	Reader client.Reader
}

// Name implements Gate.
func (ResourceQuota) Name() string { return v1alpha1.ReasonResourceQuota }

// Check implements Gate.
func (g ResourceQuota) Check(ctx context.Context, ch *Change) (*policy.Block, error) {
	var quotas corev1.ResourceQuotaList
	if err := g.Reader.List(ctx, &quotas, client.InNamespace(ch.Namespace())); err != nil {
		return nil, fmt.Errorf("list ResourceQuotas of %s: %w", ch.Namespace(), err)
	}
	if len(quotas.Items) == 0 {
		return nil, nil
	}
	add, how, sample, err := quotaIncrease(ch)
	if err != nil || sample == nil {
		return nil, err
	}
	for i := range quotas.Items {
		q := &quotas.Items[i]
		if !quotaMatches(q, sample) {
			continue
		}
		for _, name := range quotaResources {
			hard, ok := q.Status.Hard[name]
			if !ok {
				hard, ok = q.Spec.Hard[name]
			}
			need := add[name]
			if !ok || need.Sign() <= 0 {
				continue
			}
			used, counted := q.Status.Used[name]
			if !counted {
				// ResourceQuota admission refuses every pod then.
				return nil, fmt.Errorf("ResourceQuota %s/%s has no usage of %s yet (the quota controller has not counted it)", q.Namespace, q.Name, name)
			}
			free := hard.DeepCopy()
			free.Sub(used)
			if need.Cmp(free) > 0 {
				return &policy.Block{Reason: v1alpha1.ReasonResourceQuota, Message: fmt.Sprintf(
					"ResourceQuota %s/%s: %s has %s free (hard %s, used %s), the change needs %s more (%s)",
					q.Namespace, q.Name, name, free.String(), hard.String(), used.String(), need.String(), how)}, nil
			}
		}
	}
	return nil, nil
}

// quotaIncrease returns what the change adds to a quota's usage, per
// quota resource. It also says how (for the message), and returns a pod
// with the applied values to match the quotas' scopes against, nil when
// the change lands on no pod.
func quotaIncrease(ch *Change) (corev1.ResourceList, string, *corev1.Pod, error) {
	add := corev1.ResourceList{}
	if ch.Strategy == v1alpha1.StrategyInPlace {
		var sample *corev1.Pod
		n := 0
		for i := range ch.Pods {
			pod := &ch.Pods[i]
			if terminated(pod) {
				continue
			}
			changed := withValues(pod, ch.Containers)
			addTo(add, quotaCharge(changed), 1)
			subFrom(add, quotaCharge(pod))
			sample, n = changed, n+1
		}
		if n == 1 {
			return add, "in-place resize of 1 pod", sample, nil
		}
		return add, fmt.Sprintf("in-place resize of %d pods", n), sample, nil
	}
	if ch.Workload.Template == nil {
		return nil, "", nil, fmt.Errorf("%s has no pod template", ch.Workload)
	}
	before := &corev1.Pod{Spec: *ch.Workload.Template.Spec.DeepCopy()}
	after := withValues(before, ch.Containers)
	replicas, surge := rolloutShape(ch.Workload.Object)
	oldCharge, newCharge := quotaCharge(before), quotaCharge(after)
	for _, name := range quotaResources {
		peak := rolloutPeak(value(oldCharge, name), value(newCharge, name), replicas, surge)
		if peak.Sign() != 0 {
			add[name] = peak
		}
	}
	if ch.Strategy == v1alpha1.StrategyRollout && surge > 0 {
		// Deferred starts no pod: the values wait for pods made anyway.
		add[corev1.ResourcePods] = *resource.NewQuantity(min(surge, replicas), resource.DecimalSI)
		add[podCount] = add[corev1.ResourcePods]
	}
	return add, fmt.Sprintf("%d replicas, maxSurge %d, at the rollout's peak", replicas, surge), after, nil
}

// quotaCharge is what ResourceQuota admission charges for a pod, under
// each quota resource.
func quotaCharge(pod *corev1.Pod) corev1.ResourceList {
	req, lim := podRequests(pod), podLimits(pod)
	out := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]resource.Quantity{
		corev1.ResourceRequestsCPU: value(req, corev1.ResourceCPU), corev1.ResourceCPU: value(req, corev1.ResourceCPU),
		corev1.ResourceRequestsMemory: value(req, corev1.ResourceMemory), corev1.ResourceMemory: value(req, corev1.ResourceMemory),
		corev1.ResourceLimitsCPU: value(lim, corev1.ResourceCPU), corev1.ResourceLimitsMemory: value(lim, corev1.ResourceMemory),
	} {
		out[name] = q
	}
	return out
}

// rolloutShape returns how many pods a workload runs, and its maxSurge.
// That is how many more a rolling update may start before it stops old
// ones:
//   - a Deployment: spec.replicas (1 when unset); its RollingUpdate
//     maxSurge (25% when unset), a percentage rounded up, as the
//     Deployment controller does; none for Recreate;
//   - a StatefulSet: spec.replicas; no surge, it replaces pod by pod;
//   - a DaemonSet: status.desiredNumberScheduled; its RollingUpdate
//     maxSurge (0 when unset), rounded up.
func rolloutShape(o client.Object) (replicas, surge int64) {
	scaled := func(v *intstr.IntOrString, def intstr.IntOrString, total int) int64 {
		if v == nil {
			v = &def
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
		if err != nil || n < 0 {
			return 0
		}
		return int64(n)
	}
	switch w := o.(type) {
	case *appsv1.Deployment:
		replicas = 1
		if w.Spec.Replicas != nil {
			replicas = int64(*w.Spec.Replicas)
		}
		if w.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			return replicas, 0
		}
		var s *intstr.IntOrString
		if w.Spec.Strategy.RollingUpdate != nil {
			s = w.Spec.Strategy.RollingUpdate.MaxSurge
		}
		return replicas, scaled(s, intstr.FromString("25%"), int(replicas))
	case *appsv1.StatefulSet:
		replicas = 1
		if w.Spec.Replicas != nil {
			replicas = int64(*w.Spec.Replicas)
		}
		return replicas, 0
	case *appsv1.DaemonSet:
		replicas = int64(w.Status.DesiredNumberScheduled)
		var s *intstr.IntOrString
		if w.Spec.UpdateStrategy.RollingUpdate != nil {
			s = w.Spec.UpdateStrategy.RollingUpdate.MaxSurge
		}
		return replicas, scaled(s, intstr.FromInt32(0), int(replicas))
	}
	return 0, 0
}

// rolloutPeak is what a rolling update from old to new values adds, at
// its peak, to what replicas pods of old charge now. During the update at
// most replicas pods of each template run, replicas+surge in all, so the
// peak is the larger of replicas new pods with surge old ones, and surge
// new pods with replicas old ones.
func rolloutPeak(old, new resource.Quantity, replicas, surge int64) resource.Quantity {
	surge = min(surge, replicas)
	times := func(q resource.Quantity, n int64) resource.Quantity {
		out := resource.Quantity{Format: q.Format}
		for range n {
			out.Add(q)
		}
		return out
	}
	a := times(new, replicas)
	a.Add(times(old, surge))
	b := times(new, surge)
	b.Add(times(old, replicas))
	peak := a
	if b.Cmp(a) > 0 {
		peak = b
	}
	peak.Sub(times(old, replicas))
	return peak
}

// quotaMatches reports whether quota q charges pod, by its scopes and
// scope selector, as ResourceQuota admission matches them
// (podMatchesScopeFunc in Kubernetes' quota evaluator). A workload's pod
// never has activeDeadlineSeconds (the apiserver refuses it in a
// workload's template), so it is never Terminating. A scope that is not
// a pod's (VolumeAttributesClass) charges no pod.
func quotaMatches(q *corev1.ResourceQuota, pod *corev1.Pod) bool {
	reqs := make([]corev1.ScopedResourceSelectorRequirement, 0, len(q.Spec.Scopes))
	for _, s := range q.Spec.Scopes {
		reqs = append(reqs, corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists})
	}
	if q.Spec.ScopeSelector != nil {
		reqs = append(reqs, q.Spec.ScopeSelector.MatchExpressions...)
	}
	bestEffort := true
	for name := range podRequests(pod) {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory {
			bestEffort = false
		}
	}
	for name := range podLimits(pod) {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory {
			bestEffort = false
		}
	}
	for _, r := range reqs {
		var holds bool
		switch r.ScopeName {
		case corev1.ResourceQuotaScopeTerminating:
			holds = false
		case corev1.ResourceQuotaScopeNotTerminating:
			holds = true
		case corev1.ResourceQuotaScopeBestEffort:
			holds = bestEffort
		case corev1.ResourceQuotaScopeNotBestEffort:
			holds = !bestEffort
		case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
			holds = workload.UsesCrossNamespacePodAffinity(&pod.Spec)
		case corev1.ResourceQuotaScopePriorityClass:
			if !priorityClassMatches(r, pod.Spec.PriorityClassName) {
				return false
			}
			continue
		default:
			return false
		}
		if r.Operator == corev1.ScopeSelectorOpDoesNotExist {
			holds = !holds
		}
		if !holds {
			return false
		}
	}
	return true
}

// priorityClassMatches reports whether a PriorityClass scope requirement
// holds for a pod of priority class name ("" for none). It matches as a
// label selector on {PriorityClass: name}; none has no such label.
func priorityClassMatches(r corev1.ScopedResourceSelectorRequirement, name string) bool {
	switch r.Operator {
	case corev1.ScopeSelectorOpExists:
		return name != ""
	case corev1.ScopeSelectorOpDoesNotExist:
		return name == ""
	case corev1.ScopeSelectorOpIn:
		return name != "" && slices.Contains(r.Values, name)
	case corev1.ScopeSelectorOpNotIn:
		return name == "" || !slices.Contains(r.Values, name)
	}
	return false
}

// addTo adds n times list to sum.
func addTo(sum, list corev1.ResourceList, n int) {
	for name, q := range list {
		v := sum[name]
		for range n {
			v.Add(q)
		}
		sum[name] = v
	}
}

// subFrom takes list from sum.
func subFrom(sum, list corev1.ResourceList) {
	for name, q := range list {
		v := sum[name]
		v.Sub(q)
		sum[name] = v
	}
}
