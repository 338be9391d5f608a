package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ChildOOMWorkload is the child OOM scenario's workload: the OOM
// scenario's values under another name.
var ChildOOMWorkload = Workload{Name: "child-oom-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi"}

// ChildOutcome is how a container took the OOM kill of a child process,
// not its PID 1 (ChildOOM). The kernel decides it: cgroup v1 kills the
// child alone; v2 with memory.oom.group 1 kills the whole container.
type ChildOutcome struct {
	// OOMGroup is the container's memory.oom.group before the kill, as the
	// kernel had it (false on v1, which has no such setting).
	OOMGroup bool
	// RestartsBefore is the container's restartCount before the child
	// allocated; Restarts is the highest seen from then to the end.
	RestartsBefore, Restarts int32
	// OOMKilled says the kubelet reported a run of the container
	// terminated with reason OOMKilled (state or lastState) after the
	// change.
	OOMKilled bool
	// AgentOOMKills is the largest rise seen of the agent's
	// container_oom_events_total for the container. Best effort: the count
	// is per container instance and starts at 0 again after a restart.
	AgentOOMKills float64
	// ChildExit is how the workload said its child ended ("signal:
	// killed"); empty when the workload did not live to say it.
	ChildExit string
}

// Restarted says the container restarted after the child allocated.
func (c ChildOutcome) Restarted() bool { return c.Restarts > c.RestartsBefore }

// ChildOOM decreases the workload's memory in place (256Mi → 96Mi), makes
// a child process of it allocate 160 MiB so the kernel OOM-kills it, and
// expects Kerf to put the old memory back. It runs on whichever node
// Env.Node names and records in Result.Child what happened to the
// container, without assuming it: whether it restarted and whether the
// kubelet reported OOMKilled.
func (e *Env) ChildOOM(ctx context.Context, opts Options) (*Result, error) {
	w := ChildOOMWorkload
	r, pod, err := e.begin(ctx, w)
	if err != nil {
		return r, err
	}
	r.Child.OOMGroup = r.Before.MemoryOOMGroup
	r.mark("kernel", "%s %d MiB, %s", r.Before.MemoryFile(), r.Before.MemoryBytes/Mi, oomGroupFile(r.Before))

	e.Say("recommending memory 48Mi request / 96Mi limit, InPlace")
	r.Changed = time.Now()
	r.mark("scenario", "RightsizingRecommendation: memory limit 256Mi → 96Mi, InPlace")
	if _, err := e.Recommend(ctx, w, v1alpha1.StrategyInPlace, v1alpha1.ContainerResources{
		Requests: &v1alpha1.ResourceValues{Memory: quantity("48Mi")},
		Limits:   &v1alpha1.ResourceValues{Memory: quantity("96Mi")},
	}, nil); err != nil {
		return r, err
	}
	if err := e.applied(ctx, r, w, 96*Mi, 0, "pod resized in place, no restart"); err != nil {
		return r, err
	}
	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}

	pods, err := e.RunningPods(ctx, w.Selector())
	if err != nil || len(pods) != 1 {
		return r, fmt.Errorf("want the workload's one running pod before the allocation, have %d: %v", len(pods), err)
	}
	pod = &pods[0]
	r.Pod = pod.Name
	r.Child.RestartsBefore = restartCount(pod)
	r.Child.Restarts = r.Child.RestartsBefore
	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": Container}
	before, err := e.agentCounter(ctx, pod.Spec.NodeName, "container_oom_events_total", labels)
	if err != nil {
		return r, err
	}
	if e.Kills != nil {
		if err := e.traceKill(ctx, r, pod); err != nil {
			return r, err
		}
	}
	e.Say("asking the workload to allocate 160 MiB in a child process: over its new 96 MiB limit")
	r.mark("scenario", "POST /alloc?mib=160&child=1")
	if err := e.Control(ctx, pod, "alloc", "mib=160&child=1"); err != nil {
		return r, err
	}
	if err := e.awaitChildOOMRollback(ctx, r, w, pod, labels, before); err != nil {
		return r, err
	}
	err = e.restored(ctx, r, w, v1alpha1.HealthWatchOOMKills, r.Before.MemoryBytes, 0)
	e.mu.Lock()
	if !r.kernelKill.IsZero() {
		r.Timeline = append(r.Timeline, Mark{At: r.kernelKill, Who: "kernel", What: r.kernelWhat})
		r.signal(r.kernelKill)
	}
	e.mu.Unlock()
	if err != nil {
		return r, err
	}

	e.Say("watching the recommendation %s more: the rollback must stay the only one", onceSettle)
	if r.RSR, err = e.rolledBackOnce(ctx, w.Name, onceSettle); err != nil {
		return r, err
	}
	// Pod status keeps restartCount and the last termination: read at the
	// end, it has whatever the kubelet reported on the way.
	var p corev1.Pod
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
		return r, fmt.Errorf("read pod %s at the end: %w", pod.Name, err)
	}
	r.observeKubelet(&p)
	c := r.Child
	oomKilled := "no OOMKilled in pod status"
	if c.OOMKilled {
		oomKilled = "OOMKilled in pod status"
	}
	r.mark("kubelet", "pod %s at the end: restartCount %d → %d, %s", p.Name, c.RestartsBefore, c.Restarts, oomKilled)
	e.Say("the container restarted: %t (restartCount %d → %d); the kubelet reported OOMKilled: %t; the agent counted %g OOM kills; the child's end as the workload saw it: %q",
		c.Restarted(), c.RestartsBefore, c.Restarts, c.OOMKilled, c.AgentOOMKills, c.ChildExit)
	return r, nil
}

// awaitChildOOMRollback waits until the recommendation reads RolledBack,
// marking on the way what the agent on pod's node (its OOM counter past
// before), the kubelet (a restart, an OOMKilled termination) and the
// workload (its child's end) show. It waits for no one of them: which
// shows the kill is what the scenario finds out.
func (e *Env) awaitChildOOMRollback(ctx context.Context, r *Result, w Workload, pod *corev1.Pod, labels map[string]string, before float64) error {
	err := Poll(ctx, r.wait(2*time.Minute), 50*time.Millisecond, "the child's OOM kill to be rolled back", func(ctx context.Context) (bool, error) {
		if n, err := e.agentCounter(ctx, pod.Spec.NodeName, "container_oom_events_total", labels); err == nil && n-before > r.Child.AgentOOMKills {
			if r.Child.AgentOOMKills == 0 {
				r.signal(time.Now())
			}
			r.Child.AgentOOMKills = n - before
			r.mark("agent", "container_oom_events_total %g → %g", before, n)
		}
		var p corev1.Pod
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err == nil {
			r.observeKubelet(&p)
		}
		if r.Child.ChildExit == "" {
			if s, err := e.workloadStats(ctx, pod); err == nil && s.Child != nil && s.Child.State == "exited" {
				r.Child.ChildExit = s.Child.Exit
				r.mark("workload", "child pid %d exited: %s; the parent (pid %d) answers", s.Child.PID, s.Child.Exit, s.PID)
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
		return fmt.Errorf("%w; seen of the kill: %+v", err, r.Child)
	}
	return nil
}

// observeKubelet records in r.Child what pod status shows of the
// workload's container: a higher restartCount, a run terminated OOMKilled
// after the change. It marks each the first time.
func (r *Result) observeKubelet(p *corev1.Pod) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != Container {
			continue
		}
		if cs.RestartCount > r.Child.Restarts {
			r.Child.Restarts = cs.RestartCount
			r.signal(time.Now())
			r.mark("kubelet", "restartCount %d", cs.RestartCount)
		}
		// Status times are whole seconds.
		since := r.Changed.Truncate(time.Second)
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if r.Child.OOMKilled || t == nil || t.Reason != "OOMKilled" || t.FinishedAt.Time.Before(since) {
				continue
			}
			r.Child.OOMKilled = true
			r.signal(time.Now())
			r.mark("kubelet", "pod status: container terminated, reason OOMKilled, exit code %d (finishedAt %s, whole seconds)", t.ExitCode, t.FinishedAt.Format("15:04:05"))
		}
	}
}

// restartCount is the workload's container's restartCount in pod.
func restartCount(pod *corev1.Pod) int32 {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == Container {
			return cs.RestartCount
		}
	}
	return 0
}

// oomGroupFile says how the kernel OOM-kills in the container, for the
// narration.
func oomGroupFile(l Limits) string {
	switch {
	case l.Version == 1:
		return "no memory.oom.group on v1 (one process killed)"
	case l.MemoryOOMGroup:
		return "memory.oom.group 1 (the whole container killed)"
	}
	return "memory.oom.group 0 (one process killed)"
}

// workloadStats is the part of kerf-workload's GET /stats the child OOM
// scenario reads.
type workloadStats struct {
	PID   int `json:"pid"`
	Child *struct {
		PID   int    `json:"pid"`
		State string `json:"state"`
		Exit  string `json:"exit"`
	} `json:"child"`
}

// workloadStats asks the workload in pod for its GET /stats.
func (e *Env) workloadStats(ctx context.Context, pod *corev1.Pod) (workloadStats, error) {
	var s workloadStats
	url := fmt.Sprintf("http://%s:%d/stats", pod.Status.PodIP, controlPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return s, fmt.Errorf("GET %s: %w: %v", url, errNotAnswering, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return s, fmt.Errorf("GET %s: %w: %v", url, errNotAnswering, err)
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, fmt.Errorf("GET %s: %w", url, err)
	}
	return s, nil
}
