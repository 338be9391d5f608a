package healthwatch

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/resources"
)

// countRestarts sums the restarts since t0 of the named containers of the
// adopted pods, with up to three pods' details for the message. A
// container's restartCount is the higher of pod status' and the agents':
// one counter seen twice, the agents' view first. The restart an in-place
// resize causes is not counted (resizeRestarts).
func countRestarts(adopted []*corev1.Pod, ch *v1alpha1.Change, names []string, t0 time.Time, baselines map[containerKey]int32, statuses AgentStatusSource) (int, string) {
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
			b, ok := baselines[containerKey{p.UID, name}]
			if ok && !createdAfter {
				n -= int(b)
			}
			excused := 0
			if ok && !createdAfter {
				excused = min(max(n, 0), resizeRestarts(p, ch, name))
				n -= excused
			}
			if n > 0 || excused > 0 {
				total += max(n, 0)
				what := fmt.Sprint(max(n, 0))
				if ahead {
					what += " (agent, ahead of pod status)"
				}
				if excused > 0 {
					what += fmt.Sprintf(", %d more caused by the resize (resizePolicy RestartContainer) not counted", excused)
				}
				detail.add(p.Name, name, what)
			}
		}
	}
	return total, detail.String()
}

// resizeRestarts is how many restarts of the named container the change's
// own in-place resize causes. It is one when the change is InPlace and the
// container's resizePolicy is RestartContainer for a resource the change
// moved in it: the kubelet restarts the container to resize it. Else it
// is none. The caller applies it only to pods that existed at T0, the
// ones the change resized.
func resizeRestarts(pod *corev1.Pod, ch *v1alpha1.Change, name string) int {
	if ch.Strategy != v1alpha1.StrategyInPlace {
		return 0
	}
	c := specContainer(pod, name)
	if c == nil {
		return 0
	}
	for i := range ch.Containers {
		cc := &ch.Containers[i]
		if cc.Name != name {
			continue
		}
		for _, rp := range c.ResizePolicy {
			res := v1alpha1.ResourceName(rp.ResourceName)
			if rp.RestartPolicy == corev1.RestartContainer && slices.Contains(ch.Resources, res) && resources.Moved(cc, res) {
				return 1
			}
		}
	}
	return 0
}

// countOOMKills sums the OOM kills in (t0, to] of the named containers of
// the adopted pods, with up to three pods' details. Per container it
// takes max(kernel events, kernel count, status):
//   - the status count covers the terminations pod status shows and those
//     the agents saw first, each run once;
//   - the kernel count is the absolute counts of the container's instances
//     less their baselines at T0 (oom, which records those it lacks).
//
// Each of the three is a lower bound of the kills, from a source that may
// miss some and never counts one twice, so the largest is kept. A source
// may miss an event lost while the agent was down, a kill that restarts
// no container, or an instance whose cgroup went before its count was
// read.
func countOOMKills(adopted []*corev1.Pod, names []string, t0, to time.Time, baselines map[containerKey]int32, kernel KernelSource, statuses AgentStatusSource, oom *oomBaselines) (int, string) {
	counts, _ := kernel.(OOMCountSource)
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
			if b, ok := baselines[containerKey{p.UID, name}]; ok && !p.CreationTimestamp.After(t0) {
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
			abs, absKnown := absoluteOOMKills(counts, p, name, t0, oom)
			n := max(st, kn, abs)
			if n > 0 {
				total += n
				agent := ""
				if fromAgent > 0 {
					agent = fmt.Sprintf(", %d seen by the agent ahead of pod status", fromAgent)
				}
				switch {
				case absKnown:
					detail.add(p.Name, name, fmt.Sprintf("%d (kernel %d, kernel count %d since T0, status %d%s)", n, kn, abs, st, agent))
				case known:
					detail.add(p.Name, name, fmt.Sprintf("%d (kernel %d, status %d%s)", n, kn, st, agent))
				default:
					detail.add(p.Name, name, fmt.Sprintf("%d (status%s; no kernel data)", n, agent))
				}
			}
		}
	}
	return total, detail.String()
}

// statusOOMKills counts the container's runs that ended with reason
// OOMKilled in (from, to], each run once wherever it shows. Runs show in
// pod status' state.terminated and lastState.terminated, where the
// kubelet shows the two newest, and in the terminations the agents saw;
// cs and as may be nil. restarted says the container restarted since the
// change: lastState's run then also counts when it ended in from's own
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
