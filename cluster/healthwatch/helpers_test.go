package healthwatch

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// t0 is when the changes in these tests were applied.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// after returns t0 + d.
func after(d time.Duration) time.Time { return t0.Add(d) }

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// values are one container's requests and limits of cpu and memory; empty
// strings are absent.
type values struct{ reqCPU, reqMem, limCPU, limMem string }

func (v values) resources() v1alpha1.Resources {
	var r v1alpha1.Resources
	set := func(dst **v1alpha1.ResourceValues, cpu, mem string) {
		if cpu == "" && mem == "" {
			return
		}
		*dst = &v1alpha1.ResourceValues{}
		if cpu != "" {
			(*dst).CPU = q(cpu)
		}
		if mem != "" {
			(*dst).Memory = q(mem)
		}
	}
	set(&r.Requests, v.reqCPU, v.reqMem)
	set(&r.Limits, v.limCPU, v.limMem)
	return r
}

func (v values) requirements() corev1.ResourceRequirements {
	rr := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, x := range []struct {
		list corev1.ResourceList
		name corev1.ResourceName
		val  string
	}{
		{rr.Requests, corev1.ResourceCPU, v.reqCPU}, {rr.Requests, corev1.ResourceMemory, v.reqMem},
		{rr.Limits, corev1.ResourceCPU, v.limCPU}, {rr.Limits, corev1.ResourceMemory, v.limMem},
	} {
		if x.val != "" {
			x.list[x.name] = resource.MustParse(x.val)
		}
	}
	return rr
}

// The values of container app before and after the test changes.
var (
	before = values{reqCPU: "500m", reqMem: "512Mi", limCPU: "1", limMem: "512Mi"}
	// cpuDown lowers cpu only.
	cpuDown = values{reqCPU: "250m", reqMem: "512Mi", limCPU: "500m", limMem: "512Mi"}
	// memDown lowers memory only.
	memDown = values{reqCPU: "500m", reqMem: "256Mi", limCPU: "1", limMem: "256Mi"}
	// bothDown lowers both.
	bothDown = values{reqCPU: "250m", reqMem: "256Mi", limCPU: "500m", limMem: "256Mi"}
)

// change returns a change of container app from before to applied, applied
// at t0 with the strategy, touching the resources that differ.
func change(strategy v1alpha1.Strategy, applied values) *v1alpha1.Change {
	ch := &v1alpha1.Change{
		AppliedAt:  metav1.NewTime(t0),
		Strategy:   strategy,
		Containers: []v1alpha1.ContainerChange{{Name: "app", Previous: before.resources(), Applied: applied.resources()}},
	}
	if applied.reqCPU != before.reqCPU || applied.limCPU != before.limCPU {
		ch.Resources = append(ch.Resources, v1alpha1.ResourceCPU)
	}
	if applied.reqMem != before.reqMem || applied.limMem != before.limMem {
		ch.Resources = append(ch.Resources, v1alpha1.ResourceMemory)
	}
	return ch
}

// newPod returns a running pod with containers app and sidecar (sidecar
// untouched by every change), created an hour before t0, whose spec and
// status run the given values for app.
func newPod(name string, app values, opts ...func(*corev1.Pod)) corev1.Pod {
	side := values{reqCPU: "100m", reqMem: "64Mi"}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Resources: app.requirements()},
			{Name: "sidecar", Resources: side.requirements()},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", Resources: ptr.To(app.requirements()), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "sidecar", Resources: ptr.To(side.requirements()), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// createdAt sets the pod's creation time.
func createdAt(t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

// restarts sets a container's restartCount.
func restarts(container string, n int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) { containerStatus(p, container).RestartCount = n }
}

// lastTerminated sets a container's lastState.terminated.
func lastTerminated(container, reason, id string, finished time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		containerStatus(p, container).LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
			Reason: reason, ContainerID: id, ExitCode: 137, FinishedAt: metav1.NewTime(finished)}
	}
}

// terminated sets a container's state.terminated.
func terminated(container, reason, id string, finished time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		containerStatus(p, container).State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: reason, ContainerID: id, ExitCode: 137, FinishedAt: metav1.NewTime(finished)}}
	}
}

// statusRuns sets app's status resources, as the kubelet reports what runs.
func statusRuns(v values) func(*corev1.Pod) {
	return func(p *corev1.Pod) { containerStatus(p, "app").Resources = ptr.To(v.requirements()) }
}

// guardrails returns the default guardrails changed by fn.
func guardrails(fn func(*v1alpha1.RollbackGuardrails)) v1alpha1.RollbackGuardrails {
	var g v1alpha1.RollbackGuardrails
	if fn != nil {
		fn(&g)
	}
	return g
}

// point is a sample of a series at t0 + at.
type point struct {
	at                 time.Duration
	periods, throttled uint64
}

// feed adds a series of samples of one container instance to m.
func feed(m *recorded, pod corev1.Pod, container string, started time.Time, points ...point) {
	s := make([]CounterSample, len(points))
	for i, p := range points {
		s[i] = CounterSample{PodUID: pod.UID, Container: container, Started: started, At: after(p.at), Periods: p.periods, Throttled: p.throttled}
	}
	m.AddSamples(s...)
}

// recorded is the tests' signal store: a KernelSource and a CounterSource
// that keep every OOM kill and sample as added (the leader's stores are in
// cluster/signals, which imports this package).
type recorded struct {
	kills   []CounterSample // PodUID, Container and At of each kill
	samples []CounterSample
}

func newRecorded() *recorded { return &recorded{} }

// AddOOMKill records an OOM kill of a container of a pod at a kernel time.
func (r *recorded) AddOOMKill(podUID types.UID, container string, at time.Time) {
	r.kills = append(r.kills, CounterSample{PodUID: podUID, Container: container, At: at})
}

// AddSamples records counter samples.
func (r *recorded) AddSamples(samples ...CounterSample) { r.samples = append(r.samples, samples...) }

// OOMKills counts the kills in (from, to]; ok when anything was recorded
// for the container, as the agents' store says.
func (r *recorded) OOMKills(podUID types.UID, container string, from, to time.Time) (n int, ok bool) {
	for _, k := range r.kills {
		if k.PodUID == podUID && k.Container == container {
			ok = true
			if k.At.After(from) && !k.At.After(to) {
				n++
			}
		}
	}
	for _, s := range r.samples {
		ok = ok || s.PodUID == podUID && s.Container == container
	}
	return n, ok
}

// Samples returns every recorded sample of the pods.
func (r *recorded) Samples(podUIDs []types.UID, _, _ time.Time) ([]CounterSample, error) {
	var out []CounterSample
	for _, s := range r.samples {
		if slices.Contains(podUIDs, s.PodUID) {
			out = append(out, s)
		}
	}
	return out, nil
}

// ThrottleWindows sums the samples as Counters does.
func (r *recorded) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]ThrottleWindow, error) {
	return Counters(r).ThrottleWindows(pods, containers, from, to)
}
