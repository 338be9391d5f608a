package recommender

import (
	"context"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// The recommender's input: what each pass reads from the usage and kernel
// stores into the workloads' states, and the values the pods run with.

// ingest feeds a running container's new usage readings and OOM kills into
// its workload's state. It reports whether it recorded an OOM kill.
func (r *Loop) ingest(ctx context.Context, ref workload.Ref, pod *corev1.Pod, c corev1.Container, tw *trackedWorkload, st *recommend.ContainerState, now time.Time) (killed bool) {
	m := tw.model
	k := instanceKey{pod.UID, c.Name}
	in := r.instances[k]
	if in == nil {
		in = &trackedInstance{gen: tw.gen}
		r.instances[k] = in
	}
	if in.gen != tw.gen {
		// Its workload's history restarted (adopt): the peak window
		// was the old model's interval.
		in.peak, in.gen = recommend.PeakWindow{}, tw.gen
	}
	in.seen = r.tick
	var last signals.UsageSample
	r.readings = r.usage.Since(pod.UID, c.Name, in.cursor.Time(), r.readings[:0])
	for _, s := range r.readings {
		if cpuAt := in.cpuAt.Time(); !cpuAt.IsZero() && s.CPU >= in.cpu && s.At.After(cpuAt) {
			st.AddCPU(m, (s.CPU-in.cpu).Seconds()/s.At.Sub(cpuAt).Seconds(), s.At)
		}
		in.cpuAt, in.cpu = stampOf(s.At), s.CPU
		st.AddMemory(m, &in.peak, float64(s.WorkingSet), s.At)
		in.cursor, last = stampOf(s.At), s
	}
	// An OOM kill, from the agent's kernel count or the pod's status, latches
	// memory from the highest of what the container was seen using and its
	// limit, where the kernel killed it.
	limit := memoryLimit(pod, c)
	// A kill can reach the leader a pass late (the agent reads the
	// kernel's absolute count every usage interval, 10 s by default): look
	// back killLookback before the previous pass.
	since := in.passAt.Time()
	if !since.IsZero() {
		since = since.Add(-killLookback)
	}
	defer func() { in.limit, in.passAt = limit, stampOf(now) }()
	killPeak := func() float64 {
		peak := float64(max(last.WorkingSet, last.Peak))
		if l := r.killLimit(ctx, ref, c.Name, since, limit, in.limit); l > 0 {
			peak = max(peak, float64(l))
		}
		return peak
	}
	n, _ := r.kernel.OOMKills(pod.UID, c.Name, time.Time{}, now.Add(time.Hour))
	if n > int(in.kills) {
		st.RecordOOM(m, killPeak(), now)
		killed = true
	}
	in.kills = int32(min(n, math.MaxInt32)) // fewer once the store pruned old kills
	// Under a pod-level memory limit, a kill of any of the pod's
	// containers may be the pod's: it latches the pod-level memory too.
	podLevel := c.Name == v1alpha1.PodLevel
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.LastTerminationState.Terminated; (podLevel || cs.Name == c.Name) && t != nil && t.Reason == oomKilledReason && t.FinishedAt.After(in.statusOOM.Time()) {
			st.RecordOOM(m, killPeak(), t.FinishedAt.Time)
			in.statusOOM = stampOf(t.FinishedAt.Time)
			killed = true
		}
	}
	return killed
}

// killLimit is the memory limit in bytes a kill found now happened under,
// 0 when none is known. It is the lowest the container ran with since its
// previous pass:
//   - its limit now;
//   - its limit at the previous pass;
//   - the limits Kerf's own actions on the workload's recommendation put
//     in force or took away since then.
//
// The last matter because a change applied and rolled back between two
// passes is seen by no pass, and the limit now is the one the rollback
// restored. That is the usual course of an OOM kill: the rollback takes a
// few seconds, the passes are 10 s apart.
func (r *Loop) killLimit(ctx context.Context, ref workload.Ref, container string, since time.Time, now, previous int64) int64 {
	low := func(a, b int64) int64 {
		if a == 0 || (b > 0 && b < a) {
			return b
		}
		return a
	}
	limit := low(now, previous)
	var rsr v1alpha1.RightsizingRecommendation
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &rsr); err != nil ||
		rsr.Spec.TargetRef.Kind != ref.Kind || rsr.Spec.TargetRef.Name != ref.Name {
		return limit
	}
	memory := func(v *v1alpha1.ResourceValues) int64 {
		if v == nil || v.Memory == nil {
			return 0
		}
		return v.Memory.Value()
	}
	for _, a := range rsr.Status.History {
		// Whole seconds: an action of the previous pass's second counts.
		if !since.IsZero() && a.Time.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		for _, cv := range a.Containers {
			if cv.Name != container {
				continue
			}
			switch a.Type {
			case v1alpha1.ActionApplied:
				limit = low(limit, memory(cv.New.Limits))
			case v1alpha1.ActionRolledBack:
				limit = low(limit, memory(cv.Old.Limits))
			}
		}
	}
	return limit
}

// memoryLimit is the memory limit in bytes the container runs under, 0
// when it has none. It is the lower of its pod spec's and the one the
// kubelet reports in the pod's status; they differ while a resize is in
// flight. The pod-level entry's (podLevelEntry) are the pod's own.
func memoryLimit(pod *corev1.Pod, c corev1.Container) int64 {
	var limit int64
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		limit = q.Value()
	}
	lower := func(r *corev1.ResourceRequirements) {
		if r == nil {
			return
		}
		if q, ok := r.Limits[corev1.ResourceMemory]; ok && (limit == 0 || q.Value() < limit) {
			limit = q.Value()
		}
	}
	if c.Name == v1alpha1.PodLevel {
		lower(pod.Status.Resources)
		return limit
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == c.Name {
			lower(cs.Resources)
		}
	}
	return limit
}

// throttling feeds each workload fed's CFS throttling ratio since its
// previous read, summed over its pods per container name. A workload
// tracked anew reads the span the kernel store keeps every sample of.
func (r *Loop) throttling(fed map[workload.Ref]*trackedWorkload, now time.Time) {
	for _, tw := range fed {
		if tw.seen != r.tick || len(tw.pods) == 0 {
			continue
		}
		from := tw.throttledTo.Time()
		if from.IsZero() {
			from = now.Add(-signals.DefaultRecent)
		}
		tw.throttledTo = stampOf(now)
		r.kernel.ThrottleWindowsInto(r.windows, tw.pods, tw.containers.names(), from, now)
		for name, w := range r.windows {
			if st := tw.containers.get(name); st != nil && w.Periods > 0 {
				st.AddThrottling(tw.model, w.Throttled/w.Periods, now)
			}
		}
	}
}

// runningContainer is what one container of a workload runs with, over
// the workload's running pods read in a pass: per field, the highest.
type runningContainer struct {
	name           string
	request, limit recommend.Resources
	// inSpec is true when a running pod's spec has the container, not only
	// its status.
	inSpec bool
}

// foldRunning folds what pod's containers run with into running, one
// entry per container name, and returns it. Per field (CPU and memory,
// request and limit) an entry holds the highest, over the pods folded, of:
//   - the pod spec's value, which an InPlace resize changes, not the
//     template;
//   - the value the kubelet reports in status.containerStatuses[].resources,
//     which lags the spec while a resize is in flight.
//
// A pod that sets pod-level resources adds the entry v1alpha1.PodLevel:
// its spec.resources and status.resources.
//
// So a latch's "never lower" holds against every pod. The pass keeps
// these rather than the pods, which it lets go namespace by namespace.
func foldRunning(running []runningContainer, pod *corev1.Pod) []runningContainer {
	entry := func(name string) *runningContainer {
		for i := range running {
			if running[i].name == name {
				return &running[i]
			}
		}
		running = append(running, runningContainer{name: name})
		return &running[len(running)-1]
	}
	for i := range pod.Spec.Containers {
		pc := &pod.Spec.Containers[i]
		e := entry(pc.Name)
		e.inSpec = true
		e.request = highest(e.request, resourcesOf(pc.Resources.Requests))
		e.limit = highest(e.limit, resourcesOf(pc.Resources.Limits))
	}
	for i := range pod.Status.ContainerStatuses {
		if cs := &pod.Status.ContainerStatuses[i]; cs.Resources != nil {
			e := entry(cs.Name)
			e.request = highest(e.request, resourcesOf(cs.Resources.Requests))
			e.limit = highest(e.limit, resourcesOf(cs.Resources.Limits))
		}
	}
	if pl, ok := podLevelEntry(&pod.Spec); ok {
		e := entry(pl.Name)
		e.inSpec = true
		e.request = highest(e.request, resourcesOf(pl.Resources.Requests))
		e.limit = highest(e.limit, resourcesOf(pl.Resources.Limits))
		if r := pod.Status.Resources; r != nil {
			e.request = highest(e.request, resourcesOf(r.Requests))
			e.limit = highest(e.limit, resourcesOf(r.Limits))
		}
	}
	return running
}

// runningResources returns what container c of the workload really runs
// with, for the latches and guards: its entry of running (foldRunning).
// When no running pod's spec has the container, it returns the template's
// values, c's.
func runningResources(c corev1.Container, running []runningContainer) (request, limit recommend.Resources) {
	for i := range running {
		if e := &running[i]; e.name == c.Name && e.inSpec {
			return e.request, e.limit
		}
	}
	return resourcesOf(c.Resources.Requests), resourcesOf(c.Resources.Limits)
}

// highest is the field-wise maximum of a and b.
func highest(a, b recommend.Resources) recommend.Resources {
	return recommend.Resources{CPUMilli: max(a.CPUMilli, b.CPUMilli), MemoryBytes: max(a.MemoryBytes, b.MemoryBytes)}
}

// killLookback is how far before the previous pass killLimit looks for the
// limits a kill found now may have happened under. It is a few of the
// agent's usage intervals, the slowest way a kill reaches the leader.
const killLookback = time.Minute

// oomKilledReason is the reason the kubelet gives a container's
// termination by the OOM killer.
const oomKilledReason = "OOMKilled"

// entriesOf is what the recommender keeps a history of in a pod spec:
// its containers, and its pod-level entry when it has one.
func entriesOf(spec *corev1.PodSpec) []corev1.Container {
	pl, ok := podLevelEntry(spec)
	if !ok {
		return spec.Containers
	}
	return append(spec.Containers[:len(spec.Containers):len(spec.Containers)], pl)
}

// podLevelEntry is the pod-level entry of a pod spec that sets pod-level
// resources (spec.resources): a container named v1alpha1.PodLevel with
// those resources. The agent reports the pod cgroup's usage, OOM kills
// and throttling under that name (docs/health.md, "Pod-level
// resources"), so the recommender keeps its history as a container's.
func podLevelEntry(spec *corev1.PodSpec) (corev1.Container, bool) {
	if r := spec.Resources; r != nil && len(r.Requests)+len(r.Limits) > 0 {
		return corev1.Container{Name: v1alpha1.PodLevel, Resources: *r}, true
	}
	return corev1.Container{}, false
}
