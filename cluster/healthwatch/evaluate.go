package healthwatch

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// The health watch's fixed figures (docs/design.md section 3).
const (
	// ThrottlingDelay is how long after T0 the throttling window starts,
	// so the first minutes after a change (resize, restarts, warm-up) do
	// not count.
	ThrottlingDelay = 2 * time.Minute
	// MinThrottlingPeriods is how many CFS periods the window must hold
	// (Σ Δnr_periods of a container name) before its ratio is evaluated.
	MinThrottlingPeriods = 300
)

// oomKilledReason is the reason the kubelet gives a container terminated
// by the OOM killer.
const oomKilledReason = "OOMKilled"

// containerKey names one container of one pod, the unit restarts and OOM
// kills are counted per. The UID tells a recreated pod of the same name,
// such as a StatefulSet's, from the old one.
type containerKey struct {
	podUID    types.UID
	container string
}

// RestartBaselines captures each container's restartCount at T0, for the
// restart rule: restarts are restartCount increases since T0
// (docs/design.md section 3). The leader records them in status.change
// when it records the change. Every regular container of every pod is
// recorded, 0 when it has no status yet, so a pod that existed at T0 is
// never taken for a new one.
func RestartBaselines(pods []corev1.Pod) []v1alpha1.RestartBaseline {
	var out []v1alpha1.RestartBaseline
	for i := range pods {
		p := &pods[i]
		for _, c := range p.Spec.Containers {
			var n int32
			if cs := containerStatus(p, c.Name); cs != nil {
				n = cs.RestartCount
			}
			out = append(out, v1alpha1.RestartBaseline{Pod: p.Name, PodUID: string(p.UID), Container: c.Name, RestartCount: n})
		}
	}
	return out
}

// baselineMap indexes the restart baselines by pod UID and container.
func baselineMap(bs []v1alpha1.RestartBaseline) map[containerKey]int32 {
	out := make(map[containerKey]int32, len(bs))
	for _, b := range bs {
		out[containerKey{types.UID(b.PodUID), b.Container}] = b.RestartCount
	}
	return out
}

// State is where a health watch stands (docs/design.md section 3).
type State string

// The watch's states.
const (
	// StateWatching: no breach yet, the watch goes on.
	StateWatching State = "Watching"
	// StateHealthy: the watch ended without a failure, adopted enough.
	StateHealthy State = "Healthy"
	// StateBreached: the change failed; roll back Restore. A signal
	// crossed its threshold, a pod of the change stayed Unschedulable or
	// Infeasible, or too few pods adopted it.
	StateBreached State = "Breached"
)

// Input is what a health watch is decided from (docs/design.md section 3).
type Input struct {
	// Change is status.change: T0 (AppliedAt), strategy, touched
	// resources, previous and applied values.
	Change *v1alpha1.Change
	// Guardrails are the policy's rollback guardrails; empty fields take
	// the defaults of (*v1alpha1.PolicySpec).SetDefaults.
	Guardrails v1alpha1.RollbackGuardrails
	// Pods are the workload's pods, including those that ended but still
	// exist (their signals count when adopted).
	Pods []corev1.Pod
	// RestartBaselines are the restart counts at T0 (RestartBaselines),
	// as status.change.restartBaselines holds them.
	RestartBaselines []v1alpha1.RestartBaseline
	// Kernel gives the agents' OOM kill counts; nil: status counts only.
	Kernel KernelSource
	// Statuses gives the container statuses the agents saw in the
	// kubelet's Pods API before the apiserver had them; nil: pod status
	// only.
	Statuses AgentStatusSource
	// Throttling gives the throttling window; nil: throttling is not
	// evaluated, and the message says so.
	Throttling ThrottlingSource
	// ThrottlingBaselines are the CFS counters at the throttling window's
	// start, as status.change.throttlingBaselines holds them
	// (ThrottlingBaselines of Verdict). A leader that took over after the
	// window opened starts each container's window from them, not from
	// the first sample it received itself.
	ThrottlingBaselines []v1alpha1.ThrottlingBaseline
	// OOMBaselines are the kernel OOM kill counts at T0 of the container
	// instances that ran then, as status.change.oomBaselines holds them
	// (OOMBaselines of Verdict). Kills since the change are an instance's
	// absolute count less its baseline. The count comes from Kernel, when
	// it is an OOMCountSource.
	OOMBaselines []v1alpha1.OOMBaseline
}

// Verdict is the health watch's decision at one time (docs/design.md
// section 3).
type Verdict struct {
	// State is where the watch stands.
	State State
	// Reason is the HealthWatch condition's reason: v1alpha1.HealthWatch
	// Watching or Healthy, or for a breach the failure's: Restarts,
	// Unschedulable, Infeasible, OOMKills, Throttling or NotAdopted.
	Reason string
	// Restore are the resources to roll back on a breach, cpu before
	// memory: memory for OOM kills, cpu for throttling, every touched
	// resource for restarts, the union when several breach.
	Restore []v1alpha1.ResourceName
	// Figures are the figures that crossed a threshold, such as
	// "oomKills 2 ≥ 1", for status.history.
	Figures []string
	// ThrottlingApplies is true when the throttling signal is watched: the
	// change moved a container's cpu and throttlingRatio is not 0.
	ThrottlingApplies bool
	// ThrottlingEvaluated is true when throttling applies and every
	// container whose cpu changed has a ratio (≥ 300 periods in the
	// window). When it applies but is not evaluated, NotEvaluated says
	// why.
	ThrottlingEvaluated bool
	// NotEvaluated says what applies but is not evaluated (yet), such as
	// "throttling: the throttling window opens at T0+2m0s (…)"; empty
	// when everything that applies is. Its words change only when what is
	// missing does (live counts go in Message's figures). Message carries
	// it too: "not evaluated yet: …" while watching, "never evaluated: …"
	// at the end.
	NotEvaluated string
	// Message says the same for people, for the HealthWatch condition.
	Message string
	// NextCheck is when time alone could change a Watching verdict: the
	// throttling window's start or the watch's end. Zero once decided.
	NextCheck time.Time
	// Adopted and Pods are the adopted pods among the workload's current
	// pods (not terminated, not being deleted) and how many those are.
	Adopted, Pods int
	// ThrottlingBaselines, when not nil, are the throttling baselines to
	// record in status.change.throttlingBaselines. They are Input's, with
	// the containers added that the window has counters for and Input's
	// lack. An added baseline is the latest sample at or before T0+2m,
	// else the first one after it, of an instance that started before
	// T0+2m. Nil when there is nothing new, or the throttling source is
	// not the agents' counters: a PromQL source keeps its own history.
	ThrottlingBaselines []v1alpha1.ThrottlingBaseline
	// OOMBaselines, when not nil, are the OOM baselines to record in
	// status.change.oomBaselines. They are Input's, with those added of
	// the instances that ran at T0 whose absolute count the Kernel has and
	// Input's lack. An added baseline is the count as the Kernel holds it
	// now: the leader's first sight of it, right after T0 when the watch
	// starts. Nil when there is nothing new.
	OOMBaselines []v1alpha1.OOMBaseline
}

// RestoreFor returns the resources a breach of reason restores, among
// touched, cpu before memory (docs/design.md section 3). That is memory
// for OOMKills, cpu for Throttling, and all touched for Restarts,
// Unschedulable, Infeasible and NotAdopted.
func RestoreFor(reason string, touched []v1alpha1.ResourceName) []v1alpha1.ResourceName {
	var out []v1alpha1.ResourceName
	for _, r := range touched {
		if (slices.Contains(restoresAll, reason) ||
			reason == v1alpha1.HealthWatchOOMKills && r == v1alpha1.ResourceMemory ||
			reason == v1alpha1.HealthWatchThrottling && r == v1alpha1.ResourceCPU) &&
			!slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// restoresAll are the reasons whose rollback restores every touched
// resource: no one resource is to blame.
var restoresAll = []string{v1alpha1.HealthWatchRestarts, v1alpha1.HealthWatchUnschedulable, v1alpha1.HealthWatchInfeasible, v1alpha1.HealthWatchNotAdopted}

// breachOrder is the preference among breaches at once: the widest restore
// first. NotAdopted is decided only without any other.
var breachOrder = []string{v1alpha1.HealthWatchRestarts, v1alpha1.HealthWatchUnschedulable, v1alpha1.HealthWatchInfeasible,
	v1alpha1.HealthWatchOOMKills, v1alpha1.HealthWatchThrottling}

// Evaluate decides the health watch of in.Change at now (docs/design.md
// section 3). It reads no clock and writes nothing; the package
// documentation lists the decisions it makes where the design is silent.
func Evaluate(now time.Time, in Input) Verdict {
	ch := in.Change
	if ch == nil {
		return Verdict{State: StateWatching, Reason: v1alpha1.HealthWatchWatching, Message: "no change in status.change: nothing to watch"}
	}
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Rollback: *in.Guardrails.DeepCopy()}}
	spec.SetDefaults()
	g := spec.Guardrails.Rollback
	t0 := ch.AppliedAt.Time
	end := t0.Add(g.WatchDuration.Duration)
	bound := now
	if bound.After(end) {
		bound = end
	}

	// The containers each signal reads.
	var memNames, cpuNames, anyNames []string
	for i := range ch.Containers {
		cc := &ch.Containers[i]
		mem := slices.Contains(ch.Resources, v1alpha1.ResourceMemory) && resources.Moved(cc, v1alpha1.ResourceMemory)
		cpu := slices.Contains(ch.Resources, v1alpha1.ResourceCPU) && resources.Moved(cc, v1alpha1.ResourceCPU)
		if mem {
			memNames = append(memNames, cc.Name)
		}
		if cpu {
			cpuNames = append(cpuNames, cc.Name)
		}
		if mem || cpu {
			anyNames = append(anyNames, cc.Name)
		}
	}
	slices.Sort(cpuNames)
	// Under pod-level limits any container can be OOM-killed or
	// restarted; cpu is throttled in the pod's cgroup, read as the
	// pod-level entry's counters.
	memNames, anyNames = containersOf(memNames, in.Pods), containersOf(anyNames, in.Pods)

	var v Verdict
	var adopted []*corev1.Pod
	grace := g.UnschedulableGrace.Duration
	stuck := map[string]*details{} // Unschedulable and Infeasible pods past the grace
	var nextStuck time.Time        // when the first pod still within the grace passes it
	decided := true                // every current pod adopted or never will (adoption rule)
	for i := range in.Pods {
		p := &in.Pods[i]
		ok := Adopted(p, ch)
		if ok {
			adopted = append(adopted, p)
		}
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v.Pods++
		if ok {
			v.Adopted++
		} else if !wontAdopt(p, ch) {
			decided = false
		}
		reason, since, msg := stuckSince(p, ch, t0)
		if reason == "" {
			continue
		}
		if d := now.Sub(since); d >= grace {
			if stuck[reason] == nil {
				stuck[reason] = &details{}
			}
			what := fmt.Sprintf("%s for %s", reason, d.Truncate(time.Second))
			if msg != "" {
				what += ": " + cutMessage(msg, maxPodMessage)
			}
			stuck[reason].addPod(p.Name, what)
		} else if at := since.Add(grace); nextStuck.IsZero() || at.Before(nextStuck) {
			nextStuck = at
		}
	}

	var parts []string // the signals' figures, for the message
	breached := map[string]string{}
	for reason, d := range stuck {
		breached[reason] = fmt.Sprintf("%s pods %d, for unschedulableGrace %s or longer%s", strings.ToLower(reason), len(*d), grace, d.String())
	}
	if thr := *g.Restarts; thr > 0 && len(anyNames) > 0 {
		n, detail := countRestarts(adopted, ch, anyNames, t0, baselineMap(in.RestartBaselines), in.Statuses)
		fig := countFigure("restarts", n, thr)
		if n >= int(thr) {
			breached[v1alpha1.HealthWatchRestarts] = fig
		}
		parts = append(parts, fig+detail)
	}
	if thr := *g.OOMKills; thr > 0 && len(memNames) > 0 {
		oom := newOOMBaselines(in.OOMBaselines)
		n, detail := countOOMKills(adopted, memNames, t0, bound, baselineMap(in.RestartBaselines), in.Kernel, in.Statuses, oom)
		v.OOMBaselines = oom.toRecord()
		fig := countFigure("oomKills", n, thr)
		if n >= int(thr) {
			breached[v1alpha1.HealthWatchOOMKills] = fig
		}
		parts = append(parts, fig+detail)
	}
	th := evaluateThrottling(now, t0, end, bound, g.ThrottlingRatio, in.Throttling, adopted, cpuNames, in.ThrottlingBaselines)
	v.ThrottlingApplies, v.ThrottlingEvaluated = th.applies, th.evaluated
	v.ThrottlingBaselines = th.baselines
	if th.breach != "" {
		breached[v1alpha1.HealthWatchThrottling] = th.breach
	}
	parts = append(parts, th.parts...)
	if th.notEvaluated != "" {
		v.NotEvaluated = "throttling: " + th.notEvaluated
	}
	adoption := fmt.Sprintf("%d of %d pods adopted", v.Adopted, v.Pods)
	threshold := g.AdoptionThresholdPercent
	short := v.Adopted == 0 || int64(v.Adopted)*100 < int64(threshold)*int64(v.Pods)
	// The adoption threshold can no longer be met (before the end) once
	// the grace has passed and every current pod either adopted or never
	// will (wontAdopt), with at least one pod.
	hopeless := short && decided && v.Pods > 0 && !now.Before(t0.Add(grace))

	switch {
	case len(breached) == 0 && (hopeless || !now.Before(end) && short):
		v.State, v.Reason = StateBreached, v1alpha1.HealthWatchNotAdopted
		v.Restore = RestoreFor(v.Reason, ch.Resources)
		fig := fmt.Sprintf("adopted %s, below adoptionThresholdPercent %d", adoptedShare(v.Adopted, v.Pods), threshold)
		if v.Adopted == 0 {
			fig = fmt.Sprintf("adopted %s: none runs the applied values", adoptedShare(v.Adopted, v.Pods))
		}
		v.Figures = []string{fig}
		when := fmt.Sprintf("by the watch's end (%s)", stamp(end))
		if now.Before(end) {
			when = "and no other pod will adopt it before the watch's end"
		}
		v.Message = fmt.Sprintf("NotAdopted %s since the change applied at %s: %s; roll back %s", when, stamp(t0), fig, joinResources(v.Restore))
	case len(breached) > 0:
		v.State = StateBreached
		for _, reason := range breachOrder {
			fig, ok := breached[reason]
			if !ok {
				continue
			}
			if v.Reason == "" {
				v.Reason = reason
			}
			v.Figures = append(v.Figures, fig)
			for _, r := range RestoreFor(reason, ch.Resources) {
				if !slices.Contains(v.Restore, r) {
					v.Restore = append(v.Restore, r)
				}
			}
		}
		slices.Sort(v.Restore)
		v.Message = fmt.Sprintf("%s breach since the change applied at %s: roll back %s", v.Reason, stamp(t0), joinResources(v.Restore))
	case now.Before(end):
		v.State, v.Reason = StateWatching, v1alpha1.HealthWatchWatching
		v.NextCheck = end
		if w := t0.Add(ThrottlingDelay); th.applies && in.Throttling != nil && now.Before(w) && w.Before(end) {
			v.NextCheck = w
		}
		if !nextStuck.IsZero() && nextStuck.Before(v.NextCheck) {
			v.NextCheck = nextStuck
		}
		if g := t0.Add(grace); short && decided && v.Pods > 0 && g.Before(v.NextCheck) {
			v.NextCheck = g
		}
		v.Message = fmt.Sprintf("watching until %s", stamp(end))
		if v.NotEvaluated != "" {
			v.Message += "; not evaluated yet: " + v.NotEvaluated
		}
	default:
		v.State, v.Reason = StateHealthy, v1alpha1.HealthWatchHealthy
		v.Message = fmt.Sprintf("no breach in %s since %s", g.WatchDuration.Duration, stamp(t0))
		if v.NotEvaluated != "" {
			v.Message += "; never evaluated: " + v.NotEvaluated
		}
	}
	v.Message = strings.Join(append([]string{v.Message, adoption}, parts...), "; ")
	return v
}

// stuckSince reports why pod is stuck on the change's applied values, and
// since when. Only a pod of the change, whose spec holds the values, can
// be stuck. reason is:
//   - v1alpha1.HealthWatchUnschedulable when the pod is Pending with
//     PodScheduled=False, reason Unschedulable;
//   - v1alpha1.HealthWatchInfeasible when the kubelet marks its in-place
//     resize Infeasible: PodResizePending, reason Infeasible, observed for
//     the pod's generation;
//   - empty when the pod is not stuck.
//
// since is the condition's lastTransitionTime, not before t0; msg is the
// condition's message.
func stuckSince(pod *corev1.Pod, ch *v1alpha1.Change, t0 time.Time) (reason string, since time.Time, msg string) {
	if !specHolds(pod, ch) {
		return "", time.Time{}, ""
	}
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		switch {
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			pod.Status.Phase == corev1.PodPending:
			reason = v1alpha1.HealthWatchUnschedulable
		case c.Type == corev1.PodResizePending && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonInfeasible &&
			(c.ObservedGeneration == 0 || c.ObservedGeneration >= pod.Generation):
			reason = v1alpha1.HealthWatchInfeasible
		default:
			continue
		}
		since = c.LastTransitionTime.Time
		if since.Before(t0) {
			since = t0
		}
		return reason, since, c.Message
	}
	return "", time.Time{}, ""
}

// wontAdopt reports whether a pod that has not adopted the change never
// will by itself, for the adoption rule (docs/design.md section 3).
//
// A pod's resources change after its creation only by an in-place resize,
// and the leader resizes only when it applies. So a pod whose spec lacks
// the values will not get them when it was created after T0, or when the
// change is InPlace: the apply resized every pod it would. An InPlace pod
// whose spec holds them will not run them once the kubelet is done with
// it. The kubelet is done when it observed the pod's generation, reports
// resources for every container, and shows no pending or in-progress
// resize. A pod of a Rollout or Deferred change that existed at T0 may
// still be replaced, so it is not decided.
func wontAdopt(pod *corev1.Pod, ch *v1alpha1.Change) bool {
	inPlace := ch.Strategy == v1alpha1.StrategyInPlace
	if !specHolds(pod, ch) {
		return inPlace || pod.CreationTimestamp.After(ch.AppliedAt.Time)
	}
	if !inPlace || pod.Status.Phase != corev1.PodRunning || pod.Status.ObservedGeneration < pod.Generation || pod.Status.ObservedGeneration == 0 {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if (c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress) && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for i := range ch.Containers {
		if resources.Running(pod, ch.Containers[i].Name) == nil {
			return false
		}
	}
	return true
}

// countFigure formats a count against its threshold.
func countFigure(name string, n int, thr int32) string {
	if n >= int(thr) {
		return fmt.Sprintf("%s %d ≥ %d", name, n, thr)
	}
	return fmt.Sprintf("%s %d < %d", name, n, thr)
}

// details are the pods' contributions to a count. The message shows the
// first three by pod name, so it does not change with the order of pods.
type details []string

func (d *details) add(pod, container, what string) {
	*d = append(*d, fmt.Sprintf("pod %s container %s: %s", pod, container, what))
}

func (d *details) addPod(pod, what string) {
	*d = append(*d, fmt.Sprintf("pod %s %s", pod, what))
}

func (d details) String() string {
	if len(d) == 0 {
		return ""
	}
	slices.Sort(d)
	s := strings.Join(d[:min(len(d), 3)], ", ")
	if len(d) > 3 {
		s += fmt.Sprintf(" and %d more", len(d)-3)
	}
	return " (" + s + ")"
}

func adoptedShare(adopted, pods int) string {
	if pods == 0 {
		return "0 pods (there are none)"
	}
	return fmt.Sprintf("%d of %d pods (%d%%)", adopted, pods, adopted*100/pods)
}

func joinResources(rs []v1alpha1.ResourceName) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " and ")
}

// maxPodMessage bounds the part of a pod condition's message a verdict
// quotes, the scheduler's or the kubelet's. Those messages are unbounded,
// and the verdict's message and figures go to status fields that are not.
const maxPodMessage = 256

// cutMessage cuts s to at most n bytes on a rune boundary, saying how many
// bytes were left out.
func cutMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	more := func(k int) string { return fmt.Sprintf("… (and %d more bytes)", k) }
	cut := max(n-len(more(len(s))), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more(len(s)-cut)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// containersOf returns names with the pod-level entry replaced by every
// container of the pods, each name once.
func containersOf(names []string, pods []corev1.Pod) []string {
	if !slices.Contains(names, v1alpha1.PodLevel) {
		return names
	}
	out := make([]string, 0, len(names))
	for _, name := range names {
		var entries []string
		switch {
		case name != v1alpha1.PodLevel:
			entries = []string{name}
		case len(pods) > 0:
			entries = resources.Entries(&pods[0].Spec, name)
		}
		for _, e := range entries {
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}
