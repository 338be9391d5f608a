package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// CanaryWorkload is the canary scenario's workload: the OOM scenario's
// values, three replicas.
var CanaryWorkload = Workload{Name: "canary-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi", Replicas: 3}

// CanaryPolicy governs CanaryWorkload alone, over the scenarios' Policy
// (a higher weight): the same thresholds, and a canary of one pod watched
// for the whole WatchDuration.
func CanaryPolicy(ns string) *v1alpha1.RightsizingPolicy {
	p := Policy(ns, WatchDuration)
	p.Name = "canary"
	p.Spec.Weight = 200
	p.Spec.Selector.WorkloadSelector = &metav1.LabelSelector{MatchLabels: CanaryWorkload.Selector()}
	p.Spec.Guardrails.Canary = &v1alpha1.CanaryGuardrails{Pods: ptr.To[int32](1), Duration: &metav1.Duration{Duration: WatchDuration}}
	return p
}

// Canary decreases the memory of a three-replica workload in place under
// a policy with a canary of one pod. It makes the canary pod allocate
// past the new limit, and expects Kerf to resize that pod alone and to
// put its old memory back. Result.Pod is the canary; Result.Replicas
// are the three pods at the end, with their generations before the
// change in Generations.
func (e *Env) Canary(ctx context.Context) (*Result, error) {
	w := CanaryWorkload
	r, err := e.newResult(ctx, w)
	if err != nil {
		return r, err
	}
	if err := e.Client.Create(ctx, CanaryPolicy(e.Namespace)); err != nil && !apierrors.IsAlreadyExists(err) {
		return r, fmt.Errorf("create the canary policy: %w", err)
	}
	if _, err := e.Deploy(ctx, w); err != nil {
		return r, err
	}
	pods, err := e.RunningPods(ctx, w.Selector())
	if err != nil {
		return r, err
	}
	// Every pod's limits before the change: the leader may resize the
	// canary a moment after the recommendation is made.
	states, err := e.replicaStates(ctx, w, r.wait(30*time.Second))
	if err != nil {
		return r, err
	}
	limits := map[string]Limits{}
	r.Generations = map[string]int64{}
	for _, p := range states {
		limits[p.Pod], r.Generations[p.Pod] = p.Limits, p.Generation
	}

	if err := e.decreaseMemory(ctx, r, w, v1alpha1.StrategyInPlace, ", with a canary of one pod"); err != nil {
		return r, err
	}
	rsr, err := e.canaryWatched(ctx, w.Name, r.wait(time.Minute))
	if err != nil {
		return r, err
	}
	r.RSR = rsr
	r.Pod = rsr.Status.Change.Canary.Pods[0]
	canary := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == r.Pod })
	if canary < 0 {
		return r, fmt.Errorf("the canary %s is none of the running pods %v", r.Pod, r.Generations)
	}
	victim := &pods[canary]
	r.mark("leader", "canary: pod %s (1 of %d)", r.Pod, len(pods))
	e.Say("the leader chose pod %s as the canary; the other two keep their values", r.Pod)
	var ok bool
	if r.Before, ok = limits[r.Pod]; !ok {
		return r, fmt.Errorf("the canary %s was not running before the change (had %v)", r.Pod, r.Generations)
	}
	if r.Applied, err = e.podLimits(ctx, victim, 96*Mi, r.wait(time.Minute)); err != nil {
		return r, fmt.Errorf("the canary's resize: %w", err)
	}
	r.mark("kernel", "canary %s: %s %d MiB", r.Pod, r.Applied.MemoryFile(), r.Applied.MemoryBytes/Mi)

	labels := map[string]string{"namespace": e.Namespace, "pod": victim.Name, "container": Container}
	before, err := e.agentCounter(ctx, victim.Spec.NodeName, "container_oom_events_total", labels)
	if err != nil {
		return r, err
	}
	if err := e.traceKill(ctx, r, victim, workloadComm); err != nil {
		return r, err
	}
	e.Say("asking the canary %s to allocate 160 MiB, over its new 96 MiB limit", victim.Name)
	r.mark("scenario", "POST /alloc?mib=160 to %s", victim.Name)
	if err := e.Control(ctx, victim, "alloc", "mib=160"); err != nil {
		return r, err
	}
	if err := e.awaitOOMRollback(ctx, r, w, victim, labels, before); err != nil {
		return r, err
	}
	if r.RSR, err = e.waitRestored(ctx, w.Name, r.wait(2*time.Minute)); err != nil {
		return r, err
	}
	if r.Restored, err = e.podLimits(ctx, victim, r.Before.MemoryBytes, r.wait(time.Minute)); err != nil {
		return r, fmt.Errorf("the canary's restore: %w", err)
	}
	r.KernelRestored = time.Now()
	r.mark("kernel", "canary %s: %s %d MiB again", r.Pod, r.Restored.MemoryFile(), r.Restored.MemoryBytes/Mi)
	e.mu.Lock()
	if !r.kernelKill.IsZero() {
		r.Timeline = append(r.Timeline, Mark{At: r.kernelKill, Who: "kernel", What: r.kernelWhat})
		r.signal(r.kernelKill)
	}
	e.mu.Unlock()
	r.Timeline = append(r.Timeline, e.leaderMarks(ctx, w.Name)...)
	if r.Replicas, err = e.replicaStates(ctx, w, r.wait(time.Minute)); err != nil {
		return r, err
	}
	for _, p := range r.Replicas {
		e.Say("pod %s: restartCount %d, generation %d (was %d), %s %d MiB", p.Pod, p.Restarts, p.Generation, r.Generations[p.Pod], p.Limits.MemoryFile(), p.Limits.MemoryBytes/Mi)
	}
	return r, nil
}

// canaryWatched waits until the recommendation name is watched with a
// canary of one pod, and returns it.
func (e *Env) canaryWatched(ctx context.Context, name string, timeout time.Duration) (*v1alpha1.RightsizingRecommendation, error) {
	var rsr *v1alpha1.RightsizingRecommendation
	err := Poll(ctx, timeout, 50*time.Millisecond, "the change watched on its canary", func(ctx context.Context) (bool, error) {
		got, err := e.RSR(ctx, name)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		rsr = got
		ch := got.Status.Change
		return got.Status.Phase == v1alpha1.PhaseWatching && ch != nil && ch.Canary != nil && len(ch.Canary.Pods) == 1, nil
	})
	return rsr, err
}

// podLimits waits until pod's container has memory bytes as its limit in
// the kernel and returns its limits. It reads the pod anew each time: a
// restarted container has a new cgroup.
func (e *Env) podLimits(ctx context.Context, pod *corev1.Pod, memory int64, timeout time.Duration) (Limits, error) {
	var l Limits
	err := Poll(ctx, timeout, 20*time.Millisecond, fmt.Sprintf("the kernel to enforce memory=%d on pod %s", memory, pod.Name), func(ctx context.Context) (bool, error) {
		var fresh corev1.Pod
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
			return false, err
		}
		var err error
		l, err = e.KernelLimits(ctx, &fresh, Container)
		if restarting(err) {
			return false, nil
		}
		return err == nil && l.MemoryBytes == memory, err
	})
	return l, err
}
