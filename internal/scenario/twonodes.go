package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/sandbox"
)

// TwoNodesWorkload is the two-node scenario's workload: the OOM scenario's
// values, two replicas, one on each node, allowed on the VM node.
var TwoNodesWorkload = Workload{Name: "two-nodes-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi",
	Replicas: 2, OnePerNode: true, TolerateVMNode: true}

// Replica is one pod of a workload as a scenario left it.
type Replica struct {
	// Pod and Node are the pod's name and the node it runs on.
	Pod, Node string
	// VM says Node is the sandbox's VM node (cgroup v2).
	VM bool
	// Restarts is the restart count of its container.
	Restarts int32
	// Limits are the kernel's limits of its container.
	Limits Limits
	// Generation is the pod's metadata.generation, which every change
	// of its spec (an in-place resize too) increments.
	Generation int64
}

// onceSettle is how long TwoNodes keeps reading the recommendation after
// the rollback, so that a second one (for the other node's pod, or a
// repeat) would show in its history: several of the agents' 1 s samples
// and of the leader's passes.
const onceSettle = 30 * time.Second

// TwoNodes decreases the memory of a workload with one pod on each node in
// place (256Mi → 96Mi), makes only the VM node's pod allocate past the new
// limit, and expects Kerf to roll the workload back once: both pods get
// the old limit back in place, and the host node's pod is not restarted.
// It needs the sandbox's VM node; Env.Node must be empty.
func (e *Env) TwoNodes(ctx context.Context, opts Options) (*Result, error) {
	w := TwoNodesWorkload
	r := &Result{Workload: w, grace: VMNodeGrace}
	if e.Node != "" {
		return r, fmt.Errorf("the two-node scenario places its pods on both nodes itself: Env.Node must be empty, not %q", e.Node)
	}
	if err := e.needVMNode(ctx); err != nil {
		return r, err
	}
	if err := e.EnsurePolicy(ctx, WatchDuration); err != nil {
		return r, err
	}
	if _, err := e.Deploy(ctx, w); err != nil {
		return r, err
	}
	victim, bystander, err := e.vmAndHostPods(ctx, w)
	if err != nil {
		return r, err
	}
	r.Pod, r.Bystander = victim.Name, bystander.Name
	if r.Before, err = e.KernelLimits(ctx, victim, Container); err != nil {
		return r, err
	}
	other, err := e.KernelLimits(ctx, bystander, Container)
	if err != nil {
		return r, err
	}
	r.mark("kernel", "pod %s on %s: %s %d MiB; pod %s on %s: %s %d MiB", victim.Name, victim.Spec.NodeName, r.Before.MemoryFile(), r.Before.MemoryBytes/Mi,
		bystander.Name, bystander.Spec.NodeName, other.MemoryFile(), other.MemoryBytes/Mi)

	if err := e.decreaseMemory(ctx, r, w, v1alpha1.StrategyInPlace, ", for both pods"); err != nil {
		return r, err
	}
	if err := e.applied(ctx, r, w, 96*Mi, 0, "both pods resized in place, no restart"); err != nil {
		return r, err
	}
	if r.Applied, err = e.KernelLimits(ctx, victim, Container); err != nil {
		return r, fmt.Errorf("after the resize: %w", err)
	}
	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}

	labels := map[string]string{"namespace": e.Namespace, "pod": victim.Name, "container": Container}
	before, err := e.agentCounter(ctx, victim.Spec.NodeName, "container_oom_events_total", labels)
	if err != nil {
		return r, err
	}
	if e.Kills != nil || e.Console != nil {
		if err := e.traceKill(ctx, r, victim, workloadComm); err != nil {
			return r, err
		}
	}
	e.Say("asking pod %s on %s to allocate 160 MiB, over its new 96 MiB limit; pod %s on %s is left alone", victim.Name, victim.Spec.NodeName, bystander.Name, bystander.Spec.NodeName)
	r.mark("scenario", "POST /alloc?mib=160 to %s (node %s)", victim.Name, victim.Spec.NodeName)
	if err := e.Control(ctx, victim, "alloc", "mib=160"); err != nil {
		return r, err
	}
	if err := e.awaitOOMRollback(ctx, r, w, victim, labels, before); err != nil {
		return r, err
	}
	// Every running pod's kernel must enforce the old limit again.
	if err := e.restored(ctx, r, w, v1alpha1.HealthWatchOOMKills, r.Before.MemoryBytes, 0); err != nil {
		return r, err
	}
	e.mu.Lock()
	if !r.kernelKill.IsZero() {
		r.Timeline = append(r.Timeline, Mark{At: r.kernelKill, Who: "kernel", What: r.kernelWhat})
		r.signal(r.kernelKill)
	}
	e.mu.Unlock()

	e.Say("watching the recommendation %s more: the rollback must stay the only one", onceSettle)
	if r.RSR, err = e.rolledBackOnce(ctx, w.Name, onceSettle); err != nil {
		return r, err
	}
	if r.Replicas, err = e.replicaStates(ctx, w, r.wait(time.Minute)); err != nil {
		return r, err
	}
	for _, p := range r.Replicas {
		if p.Pod == r.Pod {
			r.Restored = p.Limits
		}
		r.mark("kubelet", "pod %s on %s: restartCount %d, %s %d MiB", p.Pod, p.Node, p.Restarts, p.Limits.MemoryFile(), p.Limits.MemoryBytes/Mi)
		e.Say("pod %s on %s: restartCount %d, %s %d MiB", p.Pod, p.Node, p.Restarts, p.Limits.MemoryFile(), p.Limits.MemoryBytes/Mi)
	}
	return r, nil
}

// needVMNode checks the cluster has the VM node and another node.
func (e *Env) needVMNode(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := e.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var vm, other int
	for _, n := range nodes.Items {
		if n.Labels[sandbox.VMNodeTaint] == "true" {
			vm++
		} else {
			other++
		}
	}
	if vm == 0 || other == 0 {
		return fmt.Errorf("the two-node scenario needs the sandbox's VM node (label %s=true) and another node: found %d VM and %d other nodes", sandbox.VMNodeTaint, vm, other)
	}
	return nil
}

// vmAndHostPods returns the workload's pod on the VM node and its pod on
// another node.
func (e *Env) vmAndHostPods(ctx context.Context, w Workload) (vm, host *corev1.Pod, err error) {
	pods, err := e.RunningPods(ctx, w.Selector())
	if err != nil {
		return nil, nil, err
	}
	var seen []string
	for i := range pods {
		onVM, err := e.onVMNode(ctx, pods[i].Spec.NodeName)
		if err != nil {
			return nil, nil, err
		}
		if onVM {
			vm = &pods[i]
		} else {
			host = &pods[i]
		}
		seen = append(seen, pods[i].Name+" on "+pods[i].Spec.NodeName)
	}
	if len(pods) != 2 || vm == nil || host == nil {
		return nil, nil, fmt.Errorf("want one running pod of %s on the VM node and one on another node, got: %s", w.Name, strings.Join(seen, ", "))
	}
	return vm, host, nil
}

// rolledBackOnce reads the recommendation for settle and fails if its
// history gets a second rolled_back action; it returns the last read.
func (e *Env) rolledBackOnce(ctx context.Context, name string, settle time.Duration) (*v1alpha1.RightsizingRecommendation, error) {
	var rsr *v1alpha1.RightsizingRecommendation
	deadline := time.Now().Add(settle)
	for {
		got, err := e.RSR(ctx, name)
		if err != nil {
			return rsr, err
		}
		rsr = got
		if rb := History(got, v1alpha1.ActionRolledBack); len(rb) > 1 {
			return rsr, fmt.Errorf("recommendation %s/%s rolled back %d times, want once: %+v", e.Namespace, name, len(rb), got.Status.History)
		}
		if !time.Now().Before(deadline) {
			return rsr, nil
		}
		select {
		case <-ctx.Done():
			return rsr, fmt.Errorf("watching recommendation %s/%s for a second rollback: %w", e.Namespace, name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// replicaStates returns the workload's pods with their restart counts and
// the kernel's limits, waiting up to timeout until every replica runs and
// is ready (a container restarts after an OOM kill).
func (e *Env) replicaStates(ctx context.Context, w Workload, timeout time.Duration) ([]Replica, error) {
	var out []Replica
	var last error
	err := Poll(ctx, timeout, 100*time.Millisecond, "the limits of every pod of "+w.Name, func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil {
			return false, err
		}
		if len(pods) != int(w.replicas()) {
			// A pod OOM-killed a moment ago is Running but not ready
			// until its container is back: wait for every replica.
			last = fmt.Errorf("%d of %d pods running and ready", len(pods), w.replicas())
			return false, nil
		}
		out = out[:0]
		for i := range pods {
			p := &pods[i]
			l, err := e.KernelLimits(ctx, p, Container)
			if restarting(err) {
				last = err
				return false, nil
			}
			if err != nil {
				return false, err
			}
			vm, err := e.onVMNode(ctx, p.Spec.NodeName)
			if err != nil {
				return false, err
			}
			rep := Replica{Pod: p.Name, Node: p.Spec.NodeName, VM: vm, Limits: l, Generation: p.Generation}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == Container {
					rep.Restarts = cs.RestartCount
				}
			}
			out = append(out, rep)
		}
		return true, nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %v)", err, last)
	}
	return out, err
}
