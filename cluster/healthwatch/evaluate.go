package healthwatch

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"time"

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

// ContainerKey names one container of one pod, the unit restarts and OOM
// kills are counted per (docs/design.md section 3); the UID tells a
// recreated pod of the same name (a StatefulSet's) from the old one.
type ContainerKey struct {
	// PodUID is the pod's UID.
	PodUID types.UID
	// Container is the container's name.
	Container string
}

// RestartBaselines captures each container's restartCount at T0, for the
// restart rule (docs/design.md section 3: restarts are restartCount
// increases since T0). Every regular container of every pod is recorded,
// 0 when it has no status yet, so a pod that existed at T0 is never taken
// for a new one.
func RestartBaselines(pods []corev1.Pod) map[ContainerKey]int32 {
	out := make(map[ContainerKey]int32)
	for i := range pods {
		p := &pods[i]
		for _, c := range p.Spec.Containers {
			out[ContainerKey{p.UID, c.Name}] = 0
		}
		for _, cs := range p.Status.ContainerStatuses {
			out[ContainerKey{p.UID, cs.Name}] = cs.RestartCount
		}
	}
	return out
}

// State is where a health watch stands (docs/design.md section 3).
type State string

// The watch's states.
const (
	// StateWatching: no breach yet, the watch goes on.
	StateWatching State = "Watching"
	// StateHealthy: the watch ended without a breach, adopted enough.
	StateHealthy State = "Healthy"
	// StateBreached: a signal crossed its threshold; roll back Restore.
	StateBreached State = "Breached"
	// StateNotAdopted: the watch ended without a breach but too few pods
	// run the applied values; not a rollback.
	StateNotAdopted State = "NotAdopted"
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
	// RestartBaselines are the restart counts at T0 (RestartBaselines).
	RestartBaselines map[ContainerKey]int32
	// Kernel gives the agents' OOM kill counts; nil: status counts only.
	Kernel KernelSource
	// Statuses gives the container statuses the agents saw in the
	// kubelet's Pods API before the apiserver had them; nil: pod status
	// only.
	Statuses AgentStatusSource
	// Throttling gives the throttling window; nil: throttling is not
	// evaluated, and the message says so.
	Throttling ThrottlingSource
}

// Verdict is the health watch's decision at one time (docs/design.md
// section 3).
type Verdict struct {
	// State is where the watch stands.
	State State
	// Reason is the HealthWatch condition's reason: v1alpha1.HealthWatch
	// Watching, Healthy or NotAdopted, or for a breach the signal's,
	// OOMKills, Restarts or Throttling.
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
	// window). When it applies but is not evaluated, Message holds
	// "ThrottlingNotEvaluated:" and why.
	ThrottlingEvaluated bool
	// Message says the same for people, for the HealthWatch condition.
	Message string
	// NextCheck is when time alone could change a Watching verdict: the
	// throttling window's start or the watch's end. Zero once decided.
	NextCheck time.Time
	// Adopted and Pods are the adopted pods among the workload's current
	// pods (not terminated, not being deleted) and how many those are.
	Adopted, Pods int
}

// RestoreFor returns the resources a breach of reason restores, among
// touched, cpu before memory (docs/design.md section 3): memory for
// OOMKills, cpu for Throttling, all touched for Restarts.
func RestoreFor(reason string, touched []v1alpha1.ResourceName) []v1alpha1.ResourceName {
	var out []v1alpha1.ResourceName
	for _, r := range touched {
		if (reason == v1alpha1.HealthWatchRestarts ||
			reason == v1alpha1.HealthWatchOOMKills && r == v1alpha1.ResourceMemory ||
			reason == v1alpha1.HealthWatchThrottling && r == v1alpha1.ResourceCPU) &&
			!slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// breachOrder is the preference among breaches at once: the widest restore
// first.
var breachOrder = []string{v1alpha1.HealthWatchRestarts, v1alpha1.HealthWatchOOMKills, v1alpha1.HealthWatchThrottling}

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

	var v Verdict
	var adopted []*corev1.Pod
	for i := range in.Pods {
		p := &in.Pods[i]
		ok := Adopted(p, ch)
		if ok {
			adopted = append(adopted, p)
		}
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			v.Pods++
			if ok {
				v.Adopted++
			}
		}
	}

	var parts []string // the signals' figures, for the message
	breached := map[string]string{}
	if thr := *g.Restarts; thr > 0 && len(anyNames) > 0 {
		n, detail := countRestarts(adopted, anyNames, t0, in.RestartBaselines, in.Statuses)
		fig := countFigure("restarts", n, thr)
		if n >= int(thr) {
			breached[v1alpha1.HealthWatchRestarts] = fig
		}
		parts = append(parts, fig+detail)
	}
	if thr := *g.OOMKills; thr > 0 && len(memNames) > 0 {
		n, detail := countOOMKills(adopted, memNames, t0, bound, in.RestartBaselines, in.Kernel, in.Statuses)
		fig := countFigure("oomKills", n, thr)
		if n >= int(thr) {
			breached[v1alpha1.HealthWatchOOMKills] = fig
		}
		parts = append(parts, fig+detail)
	}
	th := evaluateThrottling(now, t0, end, bound, g.ThrottlingRatio, in.Throttling, adopted, cpuNames)
	v.ThrottlingApplies, v.ThrottlingEvaluated = th.applies, th.evaluated
	if th.breach != "" {
		breached[v1alpha1.HealthWatchThrottling] = th.breach
	}
	parts = append(parts, th.parts...)
	if th.notEvaluated != "" {
		parts = append(parts, v1alpha1.HealthWatchThrottlingNotEvaluated+": "+th.notEvaluated)
	}
	adoption := fmt.Sprintf("%d of %d pods adopted", v.Adopted, v.Pods)

	switch {
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
		v.Message = fmt.Sprintf("watching until %s", stamp(end))
	case g.AdoptionThresholdPercent > 0 && (v.Pods == 0 || int64(v.Adopted)*100 < int64(g.AdoptionThresholdPercent)*int64(v.Pods)):
		v.State, v.Reason = StateNotAdopted, v1alpha1.HealthWatchNotAdopted
		v.Message = fmt.Sprintf("no breach in %s, but only %s run the applied values, below adoptionThresholdPercent %d",
			g.WatchDuration.Duration, adoptedShare(v.Adopted, v.Pods), g.AdoptionThresholdPercent)
	default:
		v.State, v.Reason = StateHealthy, v1alpha1.HealthWatchHealthy
		v.Message = fmt.Sprintf("no breach in %s since %s", g.WatchDuration.Duration, stamp(t0))
	}
	v.Message = strings.Join(append([]string{v.Message, adoption}, parts...), "; ")
	return v
}

// countFigure formats a count against its threshold.
func countFigure(name string, n int, thr int32) string {
	if n >= int(thr) {
		return fmt.Sprintf("%s %d ≥ %d", name, n, thr)
	}
	return fmt.Sprintf("%s %d < %d", name, n, thr)
}

// countRestarts sums the restarts since t0 of the named containers of the
// adopted pods, with up to three pods' details for the message. A
// container's restartCount is the higher of pod status' and the agents'
// (one counter seen twice, the agents' view first).
func countRestarts(adopted []*corev1.Pod, names []string, t0 time.Time, baselines map[ContainerKey]int32, statuses AgentStatusSource) (int, string) {
	total := 0
	var detail details
	for _, p := range adopted {
		createdAfter := p.CreationTimestamp.After(t0)
		for _, name := range names {
			cs := containerStatus(p, name)
			count, known := int32(0), cs != nil
			if known {
				count = cs.RestartCount
			}
			ahead := false
			if statuses != nil {
				if as, ok := statuses.AgentStatus(p.UID, name); ok {
					known = true
					if as.RestartCount > count {
						count, ahead = as.RestartCount, true
					}
				}
			}
			if !known {
				continue
			}
			n := int(count)
			if b, ok := baselines[ContainerKey{p.UID, name}]; ok && !createdAfter {
				n -= int(b)
			}
			if n > 0 {
				total += n
				what := fmt.Sprint(n)
				if ahead {
					what += " (agent, ahead of pod status)"
				}
				detail.add(p.Name, name, what)
			}
		}
	}
	return total, detail.String()
}

// countOOMKills sums max(kernel, status) OOM kills in (t0, to] of the named
// containers of the adopted pods, with up to three pods' details. The
// status count covers the terminations pod status shows and those the
// agents saw first, each run once.
func countOOMKills(adopted []*corev1.Pod, names []string, t0, to time.Time, baselines map[ContainerKey]int32, kernel KernelSource, statuses AgentStatusSource) (int, string) {
	total := 0
	var detail details
	for _, p := range adopted {
		for _, name := range names {
			var as *AgentStatus
			if statuses != nil {
				if s, ok := statuses.AgentStatus(p.UID, name); ok {
					as = &s
				}
			}
			cs := containerStatus(p, name)
			// Status times are whole seconds, so a run that ended in T0's
			// own second may have ended before or after the change. The
			// restart count settles it for the newest ended run: above its
			// baseline at T0, the container restarted since, so that run
			// ended after the change was recorded.
			restarted := false
			if b, ok := baselines[ContainerKey{p.UID, name}]; ok && !p.CreationTimestamp.After(t0) {
				count := int32(0)
				if cs != nil {
					count = cs.RestartCount
				}
				if as != nil {
					count = max(count, as.RestartCount)
				}
				restarted = count > b
			}
			st, fromAgent := statusOOMKills(cs, as, t0, to, restarted)
			kn, known := 0, false
			if kernel != nil {
				kn, known = kernel.OOMKills(p.UID, name, t0, to)
			}
			n := max(st, kn)
			if n > 0 {
				total += n
				agent := ""
				if fromAgent > 0 {
					agent = fmt.Sprintf(", %d seen by the agent ahead of pod status", fromAgent)
				}
				if known {
					detail.add(p.Name, name, fmt.Sprintf("%d (kernel %d, status %d%s)", n, kn, st, agent))
				} else {
					detail.add(p.Name, name, fmt.Sprintf("%d (status%s; no kernel data)", n, agent))
				}
			}
		}
	}
	return total, detail.String()
}

// statusOOMKills counts the container's runs that ended with reason
// OOMKilled in (from, to]: in pod status' state.terminated and
// lastState.terminated (the kubelet shows the two newest) and in the
// terminations the agents saw (cs and as may be nil), each run counted
// once wherever it shows. With restarted (the container restarted since
// the change), lastState's run also counts when it ended in from's own
// second. fromAgent is how many of them only the agents saw.
func statusOOMKills(cs *corev1.ContainerStatus, as *AgentStatus, from, to time.Time, restarted bool) (n, fromAgent int) {
	var counted []Termination
	add := func(t Termination, sameSecondOK bool) bool {
		after := t.FinishedAt.After(from) ||
			sameSecondOK && t.FinishedAt.Truncate(time.Second).Equal(from.Truncate(time.Second))
		if t.Reason != oomKilledReason || !after || t.FinishedAt.After(to) ||
			slices.ContainsFunc(counted, func(c Termination) bool { return c.SameRun(&t) }) {
			return false
		}
		counted = append(counted, t)
		return true
	}
	if cs != nil {
		for i, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && add(Termination{ContainerID: t.ContainerID, Reason: t.Reason, ExitCode: t.ExitCode,
				StartedAt: t.StartedAt.Time, FinishedAt: t.FinishedAt.Time}, i == 1 && restarted) {
				n++
			}
		}
	}
	if as != nil {
		for _, t := range as.Terminations {
			if add(t, false) {
				n++
				fromAgent++
			}
		}
	}
	return n, fromAgent
}

// throttling is the throttling signal's evaluation.
type throttling struct {
	applies, evaluated bool
	// breach is the worst crossing figure, empty without a breach.
	breach string
	// parts are the evaluated containers' figures, for the message.
	parts []string
	// notEvaluated says why the signal applies but is not evaluated.
	notEvaluated string
}

// ratioSyntax is the CRD's syntax of throttlingRatio: a decimal in [0, 1].
var ratioSyntax = regexp.MustCompile(`^(0([.][0-9]+)?|1([.]0+)?)$`)

// evaluateThrottling evaluates the throttling ratio of each of names over
// [t0+2m, bound], for a watch that ends at end.
func evaluateThrottling(now, t0, end, bound time.Time, ratio string, src ThrottlingSource, adopted []*corev1.Pod, names []string) throttling {
	if len(names) == 0 {
		return throttling{}
	}
	if !ratioSyntax.MatchString(ratio) {
		return throttling{applies: true, notEvaluated: fmt.Sprintf("spec.guardrails.rollback.throttlingRatio %q is not a decimal string in (0, 1] such as \"0.25\"", ratio)}
	}
	thr, _ := new(big.Rat).SetString(ratio)
	if thr.Sign() == 0 {
		return throttling{} // 0 turns the signal off
	}
	res := throttling{applies: true}
	w := t0.Add(ThrottlingDelay)
	switch {
	case src == nil:
		res.notEvaluated = "no throttling source is configured (health.metricsURL unset and health.cadvisorFallback off)"
		return res
	case now.Before(w):
		res.notEvaluated = fmt.Sprintf("the throttling window opens at T0+%s (%s)", ThrottlingDelay, stamp(w))
		return res
	case !end.After(w):
		res.notEvaluated = fmt.Sprintf("the watch ends before the throttling window opens at T0+%s", ThrottlingDelay)
		return res
	}
	windows, err := src.ThrottleWindows(adopted, names, w, bound)
	if err != nil {
		res.notEvaluated = fmt.Sprintf("read the throttling window: %v", err)
		return res
	}
	decimals := 2
	if i := strings.IndexByte(ratio, '.'); i >= 0 {
		decimals = max(decimals, len(ratio)-i-1)
	}
	var worst *big.Rat
	var pending []string
	for _, name := range names {
		win := windows[name]
		r := windowRatio(win)
		if r == nil {
			pending = append(pending, fmt.Sprintf("container %s only %.0f of %d periods", name, max(win.Periods, 0), MinThrottlingPeriods))
			continue
		}
		sign := "<"
		if r.Cmp(thr) >= 0 {
			sign = "≥"
		}
		fig := fmt.Sprintf("throttlingRatio %s %s %s (container %s, %.0f periods)", truncated(r, decimals), sign, ratio, name, win.Periods)
		res.parts = append(res.parts, fig)
		if sign == "≥" && (worst == nil || r.Cmp(worst) > 0) {
			worst, res.breach = r, fig
		}
	}
	res.evaluated = len(pending) == 0
	if !res.evaluated {
		res.notEvaluated = strings.Join(pending, ", ") + " since T0+" + ThrottlingDelay.String()
	}
	return res
}

// windowRatio returns throttled / periods exactly, nil when the window
// holds fewer than MinThrottlingPeriods periods or is not a number.
func windowRatio(w ThrottleWindow) *big.Rat {
	if math.IsNaN(w.Periods) || math.IsInf(w.Periods, 0) || w.Periods < MinThrottlingPeriods ||
		math.IsNaN(w.Throttled) || math.IsInf(w.Throttled, 0) {
		return nil
	}
	t := new(big.Rat).SetFloat64(max(w.Throttled, 0))
	return t.Quo(t, new(big.Rat).SetFloat64(w.Periods))
}

// truncated shows r with the given decimals, truncated so that a ratio
// below the threshold never shows as equal to it.
func truncated(r *big.Rat, decimals int) string {
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)
	q := new(big.Int).Mul(r.Num(), scale)
	q.Quo(q, r.Denom())
	return new(big.Rat).SetFrac(q, scale).FloatString(decimals)
}

// details are the pods' contributions to a count; the message shows the
// first three by pod name, so it does not change with the order of pods.
type details []string

func (d *details) add(pod, container, what string) {
	*d = append(*d, fmt.Sprintf("pod %s container %s: %s", pod, container, what))
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

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
