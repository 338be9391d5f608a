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
	r, _, err := e.begin(ctx, w)
	if err != nil {
		return r, err
	}
	r.Child.OOMGroup = r.Before.MemoryOOMGroup
	r.mark("kernel", "%s %d MiB, %s", r.Before.MemoryFile(), r.Before.MemoryBytes/Mi, oomGroupFile(r.Before))

	if err := e.decreaseMemory(ctx, r, w, v1alpha1.StrategyInPlace, ""); err != nil {
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
	pod := &pods[0]
	r.Pod = pod.Name
	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": Container}
	before, err := e.agentCounter(ctx, pod.Spec.NodeName, "container_oom_events_total", labels)
	if err != nil {
		return r, err
	}
	if e.Kills != nil || e.Console != nil {
		if err := e.traceKill(ctx, r, pod, childComm); err != nil {
			return r, err
		}
	}
	cw := &childWatch{changed: r.Changed, pod: pod, labels: labels, agentBefore: before, outcome: r.Child}
	cw.outcome.RestartsBefore = restartCount(pod)
	cw.outcome.Restarts = cw.outcome.RestartsBefore
	stop := e.watchChild(ctx, cw)
	e.Say("asking the workload to allocate 160 MiB in a child process: over its new 96 MiB limit")
	r.mark("scenario", "POST /alloc?mib=160&child=1")
	err = e.Control(ctx, pod, "alloc", "mib=160&child=1")
	if err == nil {
		err = e.childOOMRollback(ctx, r, w)
	}
	stop()
	if err == nil {
		// Pod status keeps restartCount and the last termination: a last
		// look has whatever the kubelet reported on the way.
		e.lookAtChild(ctx, cw)
	}
	cw.into(r)
	e.mu.Lock()
	if !r.kernelKill.IsZero() {
		r.Timeline = append(r.Timeline, Mark{At: r.kernelKill, Who: "kernel", What: r.kernelWhat})
		r.signal(r.kernelKill)
	}
	e.mu.Unlock()
	if err != nil {
		return r, fmt.Errorf("%w; seen of the kill: %+v", err, r.Child)
	}
	c := r.Child
	oomKilled := "no OOMKilled in pod status"
	if c.OOMKilled {
		oomKilled = "OOMKilled in pod status"
	}
	r.mark("kubelet", "pod %s at the end: restartCount %d → %d, %s", pod.Name, c.RestartsBefore, c.Restarts, oomKilled)
	e.Say("the container restarted: %t (restartCount %d → %d); the kubelet reported OOMKilled: %t; the agent counted %g OOM kills; the child's end as the workload saw it: %q",
		c.Restarted(), c.RestartsBefore, c.Restarts, c.OOMKilled, c.AgentOOMKills, c.ChildExit)
	return r, nil
}

// childOOMRollback waits for the rollback of the child's kill: the
// recommendation RolledBack for OOMKills, the old memory in the kernel, and
// no second rollback for onceSettle more.
func (e *Env) childOOMRollback(ctx context.Context, r *Result, w Workload) error {
	_, seen, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills, r.wait(2*time.Minute))
	if err != nil {
		return err
	}
	r.RolledBack = seen
	r.Timeline = append(r.Timeline, Mark{At: seen, Who: "scenario", What: "recommendation reads RolledBack (OOMKills)"})
	if err := e.restored(ctx, r, w, v1alpha1.HealthWatchOOMKills, r.Before.MemoryBytes, 0); err != nil {
		return err
	}
	e.Say("watching the recommendation %s more: the rollback must stay the only one", onceSettle)
	r.RSR, err = e.rolledBackOnce(ctx, w.Name, onceSettle)
	return err
}

// childWatch is what the agent, the kubelet and the workload show of a
// child's OOM kill, gathered apart from the scenario's timeline while the
// scenario waits, and added to it at the end (into).
type childWatch struct {
	changed     time.Time // the change's time: terminations before it are not the kill's
	pod         *corev1.Pod
	labels      map[string]string // the container's series in the agent's metrics
	agentBefore float64           // its container_oom_events_total before the allocation
	outcome     ChildOutcome
	marks       Timeline
	first       time.Time // the first sign of the kill
}

// watchChild looks at the kill every 50 ms until the returned stop is
// called. No one of the agent, the kubelet and the workload is waited for:
// which of them shows the kill is what the scenario finds out.
func (e *Env) watchChild(ctx context.Context, cw *childWatch) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			e.lookAtChild(ctx, cw)
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// lookAtChild reads the agent's OOM counter, pod status and, until the
// workload has said how its child ended, its GET /stats, once.
func (e *Env) lookAtChild(ctx context.Context, cw *childWatch) {
	if n, err := e.agentCounter(ctx, cw.pod.Spec.NodeName, "container_oom_events_total", cw.labels); err == nil && n-cw.agentBefore > cw.outcome.AgentOOMKills {
		cw.outcome.AgentOOMKills = n - cw.agentBefore
		cw.mark("agent", "container_oom_events_total %g → %g", cw.agentBefore, n)
	}
	var p corev1.Pod
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(cw.pod), &p); err == nil {
		cw.observeKubelet(&p)
	}
	if cw.outcome.ChildExit == "" {
		if s, err := e.workloadStats(ctx, cw.pod); err == nil && s.Child != nil && s.Child.State == "exited" {
			cw.outcome.ChildExit = s.Child.Exit
			cw.mark("workload", "child pid %d exited: %s; the parent (pid %d) answers", s.Child.PID, s.Child.Exit, s.PID)
		}
	}
}

// observeKubelet records what pod status shows of the workload's
// container: a higher restartCount, a run terminated OOMKilled after the
// change. It marks each the first time.
func (cw *childWatch) observeKubelet(p *corev1.Pod) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != Container {
			continue
		}
		if cs.RestartCount > cw.outcome.Restarts {
			cw.outcome.Restarts = cs.RestartCount
			cw.mark("kubelet", "restartCount %d", cs.RestartCount)
		}
		// Status times are whole seconds.
		since := cw.changed.Truncate(time.Second)
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if cw.outcome.OOMKilled || t == nil || t.Reason != "OOMKilled" || t.FinishedAt.Time.Before(since) {
				continue
			}
			cw.outcome.OOMKilled = true
			cw.mark("kubelet", "pod status: container terminated, reason OOMKilled, exit code %d (finishedAt %s, whole seconds)", t.ExitCode, t.FinishedAt.Format("15:04:05"))
		}
	}
}

func (cw *childWatch) mark(who, format string, args ...any) {
	now := time.Now()
	if cw.first.IsZero() {
		cw.first = now
	}
	cw.marks = append(cw.marks, Mark{At: now, Who: who, What: fmt.Sprintf(format, args...)})
}

// into adds what the watch saw to r: the outcome, the marks and the first
// sign of the kill.
func (cw *childWatch) into(r *Result) {
	r.Child = cw.outcome
	r.Timeline = append(r.Timeline, cw.marks...)
	if !cw.first.IsZero() {
		r.signal(cw.first)
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

// workloadStats is the part of kerf-workload's GET /stats the scenarios
// read.
type workloadStats struct {
	PID           int     `json:"pid"`
	AllocatedMiB  int     `json:"allocatedMiB"`
	RSSBytes      int64   `json:"rssBytes"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Child         *struct {
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
