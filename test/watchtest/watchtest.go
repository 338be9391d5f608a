// Package watchtest builds the pods, changes and container values that the
// health watch's tests (cluster/healthwatch, cluster/signals) evaluate: one
// container app changed from Before at T0, beside an untouched sidecar. It
// imports only the API types, so healthwatch's in-package tests can use it
// without an import cycle.
package watchtest

import (
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// T0 is when the test changes were applied.
var T0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// Started is when the test containers that run through the window started:
// an hour before T0, when NewPod's pods were created.
var Started = T0.Add(-time.Hour)

// After returns T0 + d, so tests say times relative to the change.
func After(d time.Duration) time.Time { return T0.Add(d) }

// Q returns the parsed quantity s, for the pointer fields of the API types;
// it panics on a malformed s, as the tests' literals never are.
func Q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// Values are one container's requests and limits of cpu and memory, as
// quantity strings; empty strings are absent.
type Values struct{ ReqCPU, ReqMem, LimCPU, LimMem string }

// Resources returns the values as a change records them (previous or
// applied); a kind (requests, limits) with neither value is nil.
func (v Values) Resources() v1alpha1.Resources {
	var r v1alpha1.Resources
	set := func(dst **v1alpha1.ResourceValues, cpu, mem string) {
		if cpu == "" && mem == "" {
			return
		}
		*dst = &v1alpha1.ResourceValues{}
		if cpu != "" {
			(*dst).CPU = Q(cpu)
		}
		if mem != "" {
			(*dst).Memory = Q(mem)
		}
	}
	set(&r.Requests, v.ReqCPU, v.ReqMem)
	set(&r.Limits, v.LimCPU, v.LimMem)
	return r
}

// Requirements returns the values as a pod's spec and status carry them.
func (v Values) Requirements() corev1.ResourceRequirements {
	rr := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, x := range []struct {
		list corev1.ResourceList
		name corev1.ResourceName
		val  string
	}{
		{rr.Requests, corev1.ResourceCPU, v.ReqCPU}, {rr.Requests, corev1.ResourceMemory, v.ReqMem},
		{rr.Limits, corev1.ResourceCPU, v.LimCPU}, {rr.Limits, corev1.ResourceMemory, v.LimMem},
	} {
		if x.val != "" {
			x.list[x.name] = resource.MustParse(x.val)
		}
	}
	return rr
}

// The values of container app before and after the test changes.
var (
	// Before is what app ran before every change.
	Before = Values{ReqCPU: "500m", ReqMem: "512Mi", LimCPU: "1", LimMem: "512Mi"}
	// CPUDown lowers cpu only.
	CPUDown = Values{ReqCPU: "250m", ReqMem: "512Mi", LimCPU: "500m", LimMem: "512Mi"}
	// MemDown lowers memory only.
	MemDown = Values{ReqCPU: "500m", ReqMem: "256Mi", LimCPU: "1", LimMem: "256Mi"}
	// BothDown lowers both.
	BothDown = Values{ReqCPU: "250m", ReqMem: "256Mi", LimCPU: "500m", LimMem: "256Mi"}
)

// Change returns a change of container app from Before to applied, applied
// at T0 with the strategy, touching the resources that differ.
func Change(strategy v1alpha1.Strategy, applied Values) *v1alpha1.Change {
	ch := &v1alpha1.Change{
		AppliedAt:  metav1.NewTime(T0),
		Strategy:   strategy,
		Containers: []v1alpha1.ContainerChange{{Name: "app", Previous: Before.Resources(), Applied: applied.Resources()}},
	}
	if applied.ReqCPU != Before.ReqCPU || applied.LimCPU != Before.LimCPU {
		ch.Resources = append(ch.Resources, v1alpha1.ResourceCPU)
	}
	if applied.ReqMem != Before.ReqMem || applied.LimMem != Before.LimMem {
		ch.Resources = append(ch.Resources, v1alpha1.ResourceMemory)
	}
	return ch
}

// NewPod returns a running pod with containers app and sidecar (sidecar
// untouched by every change), created at Started, whose spec and status run
// the given values for app, then changed by opts in order.
func NewPod(name string, app Values, opts ...func(*corev1.Pod)) corev1.Pod {
	side := Values{ReqCPU: "100m", ReqMem: "64Mi"}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(Started)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Resources: app.Requirements()},
			{Name: "sidecar", Resources: side.Requirements()},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", Resources: ptr.To(app.Requirements()), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "sidecar", Resources: ptr.To(side.Requirements()), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// CreatedAt is a NewPod option that sets the pod's creation time.
func CreatedAt(t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

// Restarts is a NewPod option that sets a container's restartCount.
func Restarts(container string, n int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) { ContainerStatus(p, container).RestartCount = n }
}

// LastTerminated is a NewPod option that sets a container's
// lastState.terminated: exit code 137 for the reason, at finished.
func LastTerminated(container, reason, id string, finished time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		ContainerStatus(p, container).LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
			Reason: reason, ContainerID: id, ExitCode: 137, FinishedAt: metav1.NewTime(finished)}
	}
}

// Terminated is a NewPod option that sets a container's state.terminated:
// exit code 137 for the reason, at finished.
func Terminated(container, reason, id string, finished time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		ContainerStatus(p, container).State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: reason, ContainerID: id, ExitCode: 137, FinishedAt: metav1.NewTime(finished)}}
	}
}

// StatusRuns is a NewPod option that sets app's status resources, as the
// kubelet reports what runs (which may differ from the spec).
func StatusRuns(v Values) func(*corev1.Pod) {
	return func(p *corev1.Pod) { ContainerStatus(p, "app").Resources = ptr.To(v.Requirements()) }
}

// ContainerStatus returns the pod's status of the named container, or nil.
func ContainerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Guardrails returns the default guardrails (the zero value) changed by
// fn, which may be nil.
func Guardrails(fn func(*v1alpha1.RollbackGuardrails)) v1alpha1.RollbackGuardrails {
	var g v1alpha1.RollbackGuardrails
	if fn != nil {
		fn(&g)
	}
	return g
}

// ThrottlingFixture is 3 pods (NewPod with CPUDown) × 2 containers of CFS
// counter samples every 10 s from T0 for 20 minutes, with a counter reset
// in one series and a restart (a new instance started in the window) in
// another; the random steps are seeded, so every call returns the same.
// sample makes one sample of the caller's type (healthwatch.CounterSample:
// this package cannot import healthwatch, whose own tests use it).
func ThrottlingFixture[S any](sample func(pod types.UID, container string, started, at time.Time, periods, throttled uint64) S) (pods []*corev1.Pod, samples []S) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i, name := range []string{"web-1", "web-2", "web-3"} {
		p := NewPod(name, CPUDown)
		pods = append(pods, &p)
		for _, c := range []string{"app", "sidecar"} {
			var periods, throttled uint64 = 50000, 1000
			inst := Started
			for j := range 120 {
				at := After(time.Duration(j) * 10 * time.Second)
				switch {
				case i == 1 && c == "app" && j == 60: // reset within the instance
					periods, throttled = 0, 0
				case i == 2 && c == "sidecar" && j == 40: // a restart
					inst, periods, throttled = at.Add(-3*time.Second), 0, 0
				}
				d := uint64(rng.IntN(100))
				periods += d
				throttled += d * uint64(rng.IntN(4)) / 4
				samples = append(samples, sample(p.UID, c, inst, at, periods, throttled))
			}
		}
	}
	return pods, samples
}
