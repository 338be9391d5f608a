package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cgroup"
)

// Mi is a mebibyte.
const Mi = 1 << 20

// Result is what a scenario saw.
type Result struct {
	// Workload is the workload the scenario changed.
	Workload Workload
	// Pod is the pod the scenario made misbehave (OOM scenario).
	Pod string
	// Timeline is what each part saw and did.
	Timeline Timeline
	// RSR is the recommendation once rolled back.
	RSR *v1alpha1.RightsizingRecommendation
	// Before, Applied and Restored are the kernel's limits of the
	// workload's container: before the change, once it was applied, and
	// after the rollback.
	Before, Applied, Restored Limits
	// Changed is when the recommendation was created; Signal is when the
	// harm was first visible (the kernel's OOM kill when Env.Kills saw it,
	// else the agent's metric or the pod status, whichever was first); RolledBack is when the recommendation read
	// RolledBack; KernelRestored is when the kernel enforced the old
	// values again.
	Changed, Signal, RolledBack, KernelRestored time.Time
	// kernelKill and kernelWhat are the kernel's own OOM kill, when a
	// KillLog saw it.
	kernelKill time.Time
	kernelWhat string
	// HPATarget is the HPA's CPU utilization target before the change,
	// after the apply and after the rollback (Restarts scenario with an
	// HPA only).
	HPATarget [3]int32
	// Bystander is the pod left alone while Pod misbehaves (TwoNodes).
	Bystander string
	// Replicas are the workload's pods at the end (TwoNodes, Canary).
	Replicas []Replica
	// Generations are the pods' metadata.generation before the change,
	// by pod name (Canary).
	Generations map[string]int64
	// Child is how the container took its child process's OOM kill
	// (ChildOOM).
	Child ChildOutcome
	// grace is added to the waits for pods on the VM node (VMNodeGrace).
	grace time.Duration
}

// wait is a wait of d, longer when the scenario's pods run on the VM node.
func (r *Result) wait(d time.Duration) time.Duration { return d + r.grace }

// newResult starts the result of a scenario on workload w, with the VM
// node's grace when Env.Node is the VM node.
func (e *Env) newResult(ctx context.Context, w Workload) (*Result, error) {
	r := &Result{Workload: w}
	vm, err := e.onVMNode(ctx, e.Node)
	if err != nil {
		return r, fmt.Errorf("the scenarios' node (Env.Node): %w", err)
	}
	if vm {
		r.grace = VMNodeGrace
	}
	return r, nil
}

// Options change how a scenario runs.
type Options struct {
	// MidWatch runs once the change is watched, before the workload is made
	// to misbehave (the tests kill the leader there).
	MidWatch func(ctx context.Context) error
	// HPA makes the Restarts scenario coordinate a HorizontalPodAutoscaler.
	HPA bool
	// Deferred makes the OOM scenario recommend with strategy Deferred: the
	// running pod keeps its values, the scenario deletes it, and its
	// replacement starts with the new ones from the webhook.
	Deferred bool
}

// WatchDuration is the scenarios' health watch: long enough for the
// throttling rule (2 minutes, then 300 periods).
const WatchDuration = 10 * time.Minute

// OOMWorkload is the OOM scenario's workload (named deferred-demo with
// Options.Deferred).
var OOMWorkload = Workload{Name: "oom-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi"}

// OOM decreases the workload's memory in place, makes it allocate more than
// the new limit so the kernel OOM-kills it, and expects Kerf to put the old
// memory back in place. With opts.Deferred the decrease reaches a new pod
// through the webhook instead, and the rollback resizes that pod back.
func (e *Env) OOM(ctx context.Context, opts Options) (*Result, error) {
	w := OOMWorkload
	if opts.Deferred {
		w.Name = "deferred-demo"
	}
	r, pod, err := e.begin(ctx, w)
	if err != nil {
		return r, err
	}
	r.mark("kernel", "%s %d MiB", r.Before.MemoryFile(), r.Before.MemoryBytes/Mi)

	strategy := v1alpha1.StrategyInPlace
	if opts.Deferred {
		strategy = v1alpha1.StrategyDeferred
	}
	if err := e.decreaseMemory(ctx, r, w, strategy, ""); err != nil {
		return r, err
	}
	how := "pod resized in place, no restart"
	if opts.Deferred {
		how = "in the new pod, from the webhook"
		if pod, err = e.replaced(ctx, r, w, pod); err != nil {
			return r, err
		}
	}
	if err := e.applied(ctx, r, w, 96*Mi, 0, how); err != nil {
		return r, err
	}
	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}

	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": Container}
	before, err := e.agentCounter(ctx, pod.Spec.NodeName, "container_oom_events_total", labels)
	if err != nil {
		return r, err
	}
	if e.Kills != nil || e.Console != nil {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil || len(pods) == 0 {
			return r, fmt.Errorf("the workload's pod is gone before the kill: %v", err)
		}
		if err := e.traceKill(ctx, r, &pods[0], workloadComm); err != nil {
			return r, err
		}
	}
	r.Pod = pod.Name
	e.Say("asking the workload to allocate 160 MiB: over its new 96 MiB limit")
	r.mark("scenario", "POST /alloc?mib=160")
	if err := e.Control(ctx, pod, "alloc", "mib=160"); err != nil {
		return r, err
	}
	if err := e.awaitOOMRollback(ctx, r, w, pod, labels, before); err != nil {
		return r, err
	}
	err = e.restored(ctx, r, w, v1alpha1.HealthWatchOOMKills, r.Before.MemoryBytes, 0)
	e.mu.Lock()
	if !r.kernelKill.IsZero() {
		r.Timeline = append(r.Timeline, Mark{At: r.kernelKill, Who: "kernel", What: r.kernelWhat})
		r.signal(r.kernelKill)
	}
	e.mu.Unlock()
	return r, err
}

// decreaseMemory recommends the OOM scenarios' change, memory limit
// 256Mi → 96Mi and request 48Mi, with strategy, and marks when; also (such
// as ", for both pods") ends the narration's line.
func (e *Env) decreaseMemory(ctx context.Context, r *Result, w Workload, strategy v1alpha1.Strategy, also string) error {
	e.Say("recommending memory 48Mi request / 96Mi limit, %s%s", strategy, also)
	r.Changed = time.Now()
	r.mark("scenario", "RightsizingRecommendation: memory limit 256Mi → 96Mi, %s", strategy)
	_, err := e.Recommend(ctx, w, strategy, v1alpha1.ContainerResources{
		Requests: &v1alpha1.ResourceValues{Memory: quantity("48Mi")},
		Limits:   &v1alpha1.ResourceValues{Memory: quantity("96Mi")},
	}, nil)
	return err
}

// traceKill starts waiting for the kernel's OOM kill of the process
// named comm in pod's container, for the timeline: from Env.Kills (a BPF
// tracer on this machine) for a pod on the host node, from Env.Console
// (the VM's serial console) for a pod on the VM node. It does nothing
// where the Env has neither.
func (e *Env) traceKill(ctx context.Context, r *Result, pod *corev1.Pod, comm string) error {
	vm, err := e.onVMNode(ctx, pod.Spec.NodeName)
	if err != nil {
		return err
	}
	found := func(at time.Time, what string) {
		e.mu.Lock()
		r.kernelKill, r.kernelWhat = at, what
		e.mu.Unlock()
	}
	switch {
	case vm && e.Console != nil:
		since := time.Now()
		go func() {
			kctx, cancel := context.WithTimeout(ctx, r.wait(time.Minute))
			defer cancel()
			if k, err := e.Console.Wait(kctx, since, comm); err == nil {
				found(k.Seen, fmt.Sprintf("OOM kill of pid %d (%s), as the VM's console showed it", k.PID, k.Comm))
			}
		}()
		return nil
	case vm:
		e.Say("no kernel time of the kill: pod %s runs on the VM node %s, and no console is followed", pod.Name, pod.Spec.NodeName)
		return nil
	case e.Kills == nil:
		return nil
	}
	dir, err := e.ContainerDir(pod, Container, "memory")
	if err != nil {
		return err
	}
	memcg, err := cgroup.CgroupID(dir)
	if err != nil {
		return err
	}
	go func() {
		kctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if ev, err := e.Kills.Wait(kctx, memcg); err == nil {
			found(ev.Time(), fmt.Sprintf("OOM kill of pid %d (%s), BPF timestamp", ev.TGID, ev.Comm))
		}
	}()
	return nil
}

// awaitOOMRollback waits until the kubelet reports pod's container
// OOMKilled and the recommendation reads RolledBack, marking what the agent
// on pod's node (its OOM counter past before), the kubelet and the leader
// show on the way.
func (e *Env) awaitOOMRollback(ctx context.Context, r *Result, w Workload, pod *corev1.Pod, labels map[string]string, before float64) error {
	var agentSaw, kubeletSaw bool
	var phase v1alpha1.Phase
	err := Poll(ctx, r.wait(2*time.Minute), 20*time.Millisecond, "the OOM kill to be seen and rolled back", func(ctx context.Context) (bool, error) {
		if !agentSaw {
			if n, err := e.agentCounter(ctx, pod.Spec.NodeName, "container_oom_events_total", labels); err == nil && n > before {
				agentSaw = true
				r.signal(time.Now())
				r.mark("agent", "container_oom_events_total %g → %g", before, n)
			}
		}
		if !kubeletSaw {
			var p corev1.Pod
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err == nil {
				for _, cs := range p.Status.ContainerStatuses {
					if t := cs.LastTerminationState.Terminated; cs.Name == Container && t != nil && t.Reason == "OOMKilled" {
						kubeletSaw = true
						r.signal(time.Now())
						r.mark("kubelet", "pod status: container terminated, reason OOMKilled, exit code %d (finishedAt %s, whole seconds)", t.ExitCode, t.FinishedAt.Format("15:04:05"))
					}
				}
			}
		}
		rsr, err := e.RSR(ctx, w.Name)
		if err != nil {
			return false, err
		}
		phase = rsr.Status.Phase
		if rsr.Status.Phase == v1alpha1.PhaseRolledBack && r.RolledBack.IsZero() {
			r.RolledBack = time.Now()
			r.mark("scenario", "recommendation reads RolledBack (%s)", rsr.Status.Reason)
		}
		// The agent's count is best effort: it is per container instance,
		// as cadvisor's, and the restarted container's starts at 0 again,
		// so a slow look may miss the killed one's.
		return kubeletSaw && !r.RolledBack.IsZero(), nil
	})
	if err == nil {
		return nil
	}
	// Say what was and was not seen, and what the workload says of itself:
	// a kill that never came and a rollback that never followed one are
	// different failures.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := "the workload does not answer GET /stats"
	if s, serr := e.workloadStats(sctx, pod); serr == nil {
		now = fmt.Sprintf("the workload (pid %d, up %.0f s) holds %d MiB, RSS %d MiB", s.PID, s.UptimeSeconds, s.AllocatedMiB, s.RSSBytes/Mi)
	}
	return fmt.Errorf("%w; agent counted the kill: %t; kubelet reported OOMKilled: %t; recommendation phase %q; %s", err, agentSaw, kubeletSaw, phase, now)
}

// ThrottleWorkload is the throttling scenario's workload: it burns 400
// millicores.
var ThrottleWorkload = Workload{Name: "throttle-demo", CPURequest: "50m", CPULimit: "1", MemoryRequest: "32Mi", MemoryLimit: "64Mi",
	Args: []string{"--burn-millicores=400"}}

// Throttling decreases the CPU limit of a workload that burns 400
// millicores to 100 millicores in place. The kernel throttles it in nearly
// every period; after the two minutes the rule waits and 300 more periods,
// Kerf puts the old limit back.
func (e *Env) Throttling(ctx context.Context, opts Options) (*Result, error) {
	w := ThrottleWorkload
	r, pod, err := e.begin(ctx, w)
	if err != nil {
		return r, err
	}
	r.mark("kernel", "%s %d per %d µs (%d millicores)", r.Before.CPUQuotaFile(), r.Before.CPUQuotaMicros, r.Before.CPUPeriodMicros, r.Before.CPUMillis())

	e.Say("recommending a CPU limit of 100m (from 1), in place; the workload keeps burning 400m")
	r.Changed = time.Now()
	r.mark("scenario", "RightsizingRecommendation: cpu limit 1 → 100m, InPlace")
	if _, err := e.Recommend(ctx, w, v1alpha1.StrategyInPlace, v1alpha1.ContainerResources{
		Limits: &v1alpha1.ResourceValues{CPU: quantity("100m")},
	}, nil); err != nil {
		return r, err
	}
	if err := e.applied(ctx, r, w, 0, 100, "pod resized in place, no restart"); err != nil {
		return r, err
	}
	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}
	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": Container}
	node := pod.Spec.NodeName
	p0, _ := e.agentCounter(ctx, node, "container_cpu_cfs_periods_total", labels)
	t0, _ := e.agentCounter(ctx, node, "container_cpu_cfs_throttled_periods_total", labels)
	e.Say("the kernel throttles it now; the rule counts from 2 minutes after the change, once 300 periods are in the window")
	windowOpen := r.Applied2m()
	var saidThrottled, saidWindow, said300 bool
	var pw, tw float64 // counters at the window start
	err = Poll(ctx, r.wait(6*time.Minute), 250*time.Millisecond, "the throttling rollback", func(ctx context.Context) (bool, error) {
		p, err1 := e.agentCounter(ctx, node, "container_cpu_cfs_periods_total", labels)
		t, err2 := e.agentCounter(ctx, node, "container_cpu_cfs_throttled_periods_total", labels)
		if err1 == nil && err2 == nil && p > p0 {
			if !saidThrottled && (t-t0)/(p-p0) >= 0.25 && p-p0 >= 10 {
				saidThrottled = true
				r.signal(time.Now())
				r.mark("agent", "throttled %g of %g periods since the change (%.0f%%)", t-t0, p-p0, 100*(t-t0)/(p-p0))
				e.Say("the agent sees %.0f%% of periods throttled", 100*(t-t0)/(p-p0))
			}
			if !saidWindow && time.Now().After(windowOpen) {
				saidWindow = true
				pw, tw = p, t
				r.mark("rule", "the throttling window opens (T0 + 2m)")
				e.Say("two minutes after the change: the window opens")
			}
			if saidWindow && !said300 && p-pw >= 300 {
				said300 = true
				r.mark("agent", "300 periods in the window, %g of them throttled: the rule can decide", t-tw)
				e.Say("300 periods in the window (%.0f%% throttled)", 100*(t-tw)/(p-pw))
			}
		}
		rsr, err := e.RSR(ctx, w.Name)
		if err != nil {
			return false, err
		}
		if rsr.Status.Phase == v1alpha1.PhaseRolledBack {
			r.RolledBack = time.Now()
			r.mark("scenario", "recommendation reads RolledBack (%s)", rsr.Status.Reason)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return r, err
	}
	return r, e.restored(ctx, r, w, v1alpha1.HealthWatchThrottling, 0, r.Before.CPUMillis())
}

// begin runs a scenario's first steps: the policy, the workload running,
// and the kernel's limits of its container before any change.
func (e *Env) begin(ctx context.Context, w Workload) (*Result, *corev1.Pod, error) {
	r, err := e.newResult(ctx, w)
	if err != nil {
		return r, nil, err
	}
	if err := e.EnsurePolicy(ctx, WatchDuration); err != nil {
		return r, nil, err
	}
	pod, err := e.Deploy(ctx, w)
	if err != nil {
		return r, nil, err
	}
	r.Before, err = e.KernelLimits(ctx, pod, Container)
	return r, pod, err
}

// Applied2m is when the throttling window opens: two minutes after the
// change was applied (the first leader mark "applied").
func (r *Result) Applied2m() time.Time {
	if r.RSR != nil && r.RSR.Status.Change != nil && !r.RSR.Status.Change.AppliedAt.IsZero() {
		return r.RSR.Status.Change.AppliedAt.Add(2 * time.Minute)
	}
	return r.Changed.Add(2 * time.Minute)
}

// waitRestored waits until the leader recorded the rollback as done
// (status.breach.restored, with its rolled_back action): the phase reads
// RolledBack first, the record follows the restore.
func (e *Env) waitRestored(ctx context.Context, name string, timeout time.Duration) (*v1alpha1.RightsizingRecommendation, error) {
	var rsr *v1alpha1.RightsizingRecommendation
	err := Poll(ctx, timeout, 50*time.Millisecond, "the rollback of "+name+" to be recorded as restored", func(ctx context.Context) (bool, error) {
		r, err := e.RSR(ctx, name)
		if err != nil {
			return false, err
		}
		rsr = r
		return r.Status.Breach != nil && r.Status.Breach.Restored, nil
	})
	return rsr, err
}

// waitRolledBack waits until the recommendation's history holds a
// rolled_back action with reason: the rollback's record, written once
// the restore is done.
func (e *Env) waitRolledBack(ctx context.Context, name, reason string, timeout time.Duration) (*v1alpha1.RightsizingRecommendation, error) {
	var rsr *v1alpha1.RightsizingRecommendation
	last := ""
	err := Poll(ctx, timeout, 50*time.Millisecond, fmt.Sprintf("recommendation %s/%s to record a rollback for %s", e.Namespace, name, reason), func(ctx context.Context) (bool, error) {
		r, err := e.RSR(ctx, name)
		if err != nil {
			return false, err
		}
		rsr, last = r, string(r.Status.Phase)+" "+r.Status.Reason
		for _, a := range History(r, v1alpha1.ActionRolledBack) {
			if a.Reason == reason {
				return true, nil
			}
		}
		if r.Status.Phase == v1alpha1.PhaseFailed {
			return false, fmt.Errorf("recommendation is %s (%s): %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
		return false, nil
	})
	if err != nil && rsr != nil {
		err = fmt.Errorf("%w; it is %s", err, last)
	}
	return rsr, err
}

// replaced waits for a Deferred change to be watched, checks the running
// pod kept its values, deletes it and returns its replacement, which the
// webhook gave the new values.
func (e *Env) replaced(ctx context.Context, r *Result, w Workload, pod *corev1.Pod) (*corev1.Pod, error) {
	if _, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", r.wait(time.Minute)); err != nil {
		return nil, err
	}
	l, err := e.KernelLimits(ctx, pod, Container)
	if err != nil {
		return nil, err
	}
	if l != r.Before {
		return nil, fmt.Errorf("pod %s changed before it was recreated (Deferred): %+v, was %+v", pod.Name, l, r.Before)
	}
	e.Say("the running pod keeps its values (Deferred); deleting it: its replacement starts with the new ones")
	r.mark("scenario", "pod %s deleted; it ran %s %d MiB still", pod.Name, l.MemoryFile(), l.MemoryBytes/Mi)
	if err := e.Client.Delete(ctx, pod); err != nil {
		return nil, err
	}
	var fresh *corev1.Pod
	err = Poll(ctx, r.wait(2*time.Minute), 50*time.Millisecond, "the replacement pod", func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil || len(pods) != 1 || pods[0].UID == pod.UID {
			return false, err
		}
		fresh = &pods[0]
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	r.mark("kubelet", "replacement pod %s running", fresh.Name)
	return fresh, nil
}

// applied waits for the change to be watched and enforced by the kernel;
// how says how the values got there, for the narration.
func (e *Env) applied(ctx context.Context, r *Result, w Workload, memory, cpuMillis int64, how string) error {
	rsr, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", r.wait(time.Minute))
	if err != nil {
		return err
	}
	r.RSR = rsr
	at, err := e.WaitKernelLimits(ctx, w.Selector(), Container, memory, cpuMillis, r.wait(time.Minute))
	if err != nil {
		return err
	}
	if r.Applied, err = e.CurrentLimits(ctx, w.Selector(), Container, r.wait(30*time.Second)); err != nil {
		return fmt.Errorf("after the resize: %w", err)
	}
	r.Timeline = append(r.Timeline, Mark{At: at, Who: "kernel", What: fmt.Sprintf("enforces the change: %s %d MiB, %d millicores", r.Applied.MemoryFile(), r.Applied.MemoryBytes/Mi, r.Applied.CPUMillis())})
	e.Say("the kernel enforces the new values (%s)", how)
	return nil
}

// restored waits for the rollback with reason to be recorded and the old
// values in the kernel, and records the end state. It reads the history,
// not the phase: the phase is RolledBack only until the next values are
// planned (a newer spec held while the change was watched, or the
// recommender's next recommendation), which may be at once.
func (e *Env) restored(ctx context.Context, r *Result, w Workload, reason string, memory, cpuMillis int64) error {
	rsr, err := e.waitRolledBack(ctx, w.Name, reason, r.wait(2*time.Minute))
	if err != nil {
		return err
	}
	at, err := e.WaitKernelLimits(ctx, w.Selector(), Container, memory, cpuMillis, r.wait(time.Minute))
	if err != nil {
		return err
	}
	r.KernelRestored = at
	if r.Restored, err = e.CurrentLimits(ctx, w.Selector(), Container, r.wait(30*time.Second)); err != nil {
		return fmt.Errorf("after the rollback: %w", err)
	}
	r.RSR = rsr
	r.Timeline = append(r.Timeline, Mark{At: at, Who: "kernel", What: fmt.Sprintf("enforces the old values again: %s %d MiB, %d millicores", r.Restored.MemoryFile(), r.Restored.MemoryBytes/Mi, r.Restored.CPUMillis())})
	r.Timeline = append(r.Timeline, e.leaderMarks(ctx, w.Name)...)
	e.Say("rolled back (%s): the kernel enforces the old values again", reason)
	return nil
}

func (r *Result) mark(who, format string, args ...any) {
	r.Timeline = append(r.Timeline, Mark{At: time.Now(), Who: who, What: fmt.Sprintf(format, args...)})
}

func (r *Result) signal(at time.Time) {
	if r.Signal.IsZero() || at.Before(r.Signal) {
		r.Signal = at
	}
}

// agentCounter sums a counter of /metrics of the agent on node (the
// workload pod's) over the series that match labels.
func (e *Env) agentCounter(ctx context.Context, node, name string, labels map[string]string) (float64, error) {
	m, err := e.AgentMetricsOn(ctx, node)
	if err != nil {
		return 0, err
	}
	return Sum(m, name, labels), nil
}
