package signals

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/test/watchtest"
)

// BenchmarkEvaluate decides the watch of a workload of 20 pods × 2 changed
// containers, each with 120 counter samples (10 s apart) in a Kernel
// and an OOM kill in one pod: with the Kernel as healthwatch.ThrottlingSource
// (sums in place) and through healthwatch.Counters (samples copied out).
func BenchmarkEvaluate(b *testing.B) {
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.BothDown)
	ch.Containers = append(ch.Containers, v1alpha1.ContainerChange{
		Name:     "sidecar",
		Previous: watchtest.Values{ReqCPU: "100m", ReqMem: "64Mi"}.Resources(),
		Applied:  watchtest.Values{ReqCPU: "50m", ReqMem: "64Mi"}.Resources(),
	})
	side := func(p *corev1.Pod) {
		rr := watchtest.Values{ReqCPU: "50m", ReqMem: "64Mi"}.Requirements()
		p.Spec.Containers[1].Resources = *rr.DeepCopy()
		watchtest.ContainerStatus(p, "sidecar").Resources = &rr
	}
	m := NewKernel()
	pods := make([]corev1.Pod, 20)
	for i := range pods {
		pods[i] = watchtest.NewPod(fmt.Sprintf("web-%d", i), watchtest.BothDown, side, watchtest.Restarts("app", 1))
		for _, c := range []string{"app", "sidecar"} {
			s := make([]healthwatch.CounterSample, 120)
			for j := range s {
				s[j] = healthwatch.CounterSample{PodUID: pods[i].UID, Container: c, Started: watchtest.Started, At: watchtest.After(time.Minute + time.Duration(j)*10*time.Second),
					Periods: uint64(100000 + 100*j), Throttled: uint64(1000 + 5*j)}
			}
			m.AddSamples(s...)
		}
	}
	m.AddOOMKill(pods[7].UID, "app", watchtest.After(5*time.Minute))
	now := watchtest.After(21 * time.Minute)
	for _, src := range []struct {
		name string
		src  healthwatch.ThrottlingSource
	}{{"Kernel", m}, {"Counters", healthwatch.Counters(m)}} {
		b.Run(src.name, func(b *testing.B) {
			in := healthwatch.Input{Change: ch, Pods: pods, RestartBaselines: healthwatch.RestartBaselines(pods), Kernel: m, Throttling: src.src,
				Guardrails: watchtest.Guardrails(func(g *v1alpha1.RollbackGuardrails) { g.OOMKills = new(int32(2)) })}
			if v := healthwatch.Evaluate(now, in); v.State != healthwatch.StateWatching || !v.ThrottlingEvaluated {
				b.Fatalf("unexpected verdict: %+v", v)
			}
			b.ReportAllocs()
			for b.Loop() {
				healthwatch.Evaluate(now, in)
			}
		})
	}
}

// BenchmarkSignalAmong10000Watches is the watch engine's cost per signal
// while 10,000 watches run: the source holds every watch's counters (two
// pods each, 12 samples per container), a new sample arrives for one pod,
// and that pod's watch is evaluated. It is what the leader does per
// agent signal; the other watches cost nothing until their own signal.
func BenchmarkSignalAmong10000Watches(b *testing.B) {
	const watches = 10000
	ch := watchtest.Change(v1alpha1.StrategyInPlace, watchtest.BothDown)
	m := NewKernel()
	pods := make([][]corev1.Pod, watches)
	for w := range watches {
		pods[w] = []corev1.Pod{watchtest.NewPod(fmt.Sprintf("w%d-a", w), watchtest.BothDown), watchtest.NewPod(fmt.Sprintf("w%d-b", w), watchtest.BothDown)}
		for _, p := range pods[w] {
			s := make([]healthwatch.CounterSample, 12)
			for j := range s {
				s[j] = healthwatch.CounterSample{PodUID: p.UID, Container: "app", Started: watchtest.Started, At: watchtest.After(time.Minute + time.Duration(j)*10*time.Second),
					Periods: uint64(1000 + 100*j), Throttled: uint64(10 + j)}
			}
			m.AddSamples(s...)
		}
	}
	ins := make([]healthwatch.Input, watches)
	for w := range watches {
		ins[w] = healthwatch.Input{Change: ch, Pods: pods[w], RestartBaselines: healthwatch.RestartBaselines(pods[w]), Kernel: m, Throttling: m, Guardrails: watchtest.Guardrails(nil)}
	}
	now := watchtest.After(4 * time.Minute)
	if v := healthwatch.Evaluate(now, ins[0]); v.State != healthwatch.StateWatching || !v.ThrottlingEvaluated {
		b.Fatalf("unexpected verdict: %+v", v)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w := i % watches
		p := &pods[w][0]
		m.AddSamples(healthwatch.CounterSample{PodUID: p.UID, Container: "app", Started: watchtest.Started, At: now, Periods: uint64(3000 + i), Throttled: 30})
		healthwatch.Evaluate(now, ins[w])
		i++
	}
}
