package recommend

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchContainers is the fleet size of issue 13's benchmarks.
const benchContainers = 300_000

// benchDays is the history each benchmark container has: the whole window.
const benchDays = 8

// fleet builds n containers with eight days of history each: a CPU sample
// every 30 minutes, lognormal around a per-container mean between 10m and 2
// cores (σ 0.4, a spread of about 50 buckets), a memory sample every 2 hours
// around a per-container level between 50Mi and 4Gi (σ 0.05, one instance),
// 10 % of them throttled once and 1 % OOM-killed once.
func fleet(m *Model, n int) ([]*ContainerState, []PeakWindow) {
	states := make([]*ContainerState, n)
	windows := make([]PeakWindow, n)
	for i := range states {
		rng := rand.New(rand.NewPCG(uint64(i), 13))
		cpuMean := math.Exp(math.Log(0.01) + rng.Float64()*(math.Log(2)-math.Log(0.01)))
		memLevel := math.Exp(math.Log(50*Mi) + rng.Float64()*(math.Log(4096*Mi)-math.Log(50*Mi)))
		s := &ContainerState{}
		for k := 0; k < benchDays*48; k++ {
			at := t0.Add(time.Duration(k) * 30 * time.Minute)
			s.AddCPU(m, cpuMean*math.Exp(0.4*rng.NormFloat64()), at)
			if k%4 == 0 {
				s.AddMemory(m, &windows[i], memLevel*math.Exp(0.05*rng.NormFloat64()), at)
			}
		}
		if i%10 == 0 {
			s.AddThrottling(m, 0.3, t0.Add(time.Duration(i%benchDays)*24*time.Hour))
		}
		if i%100 == 0 {
			s.RecordOOM(m, memLevel, t0.Add(time.Duration(i%benchDays)*24*time.Hour))
		}
		states[i] = s
	}
	return states, windows
}

// BenchmarkMemoryPerContainer300k reports the heap bytes per tracked
// container (the state, its pointer, and one instance's PeakWindow) with
// 300,000 containers, from runtime.MemStats before and after building them.
func BenchmarkMemoryPerContainer300k(b *testing.B) {
	m := defaultModel(b)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		states, windows := fleet(m, benchContainers)
		runtime.GC()
		runtime.ReadMemStats(&after)
		var cpuBuckets, memBuckets int
		for _, s := range states {
			cpuBuckets += len(s.CPU.w)
			memBuckets += len(s.Memory.w)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/benchContainers, "bytes/container")
		b.ReportMetric(float64(cpuBuckets)/benchContainers, "cpuBuckets/container")
		b.ReportMetric(float64(memBuckets)/benchContainers, "memBuckets/container")
		runtime.KeepAlive(states)
		runtime.KeepAlive(windows)
	}
}

var (
	passOnce   sync.Once
	passStates []*ContainerState
)

// BenchmarkRecommendPass300k reports one recommendation pass (signals,
// estimate, latches, guards) over 300,000 containers, per container. Run it
// with -cpu 1: the pass is one goroutine.
func BenchmarkRecommendPass300k(b *testing.B) {
	m := defaultModel(b)
	passOnce.Do(func() { passStates, _ = fleet(m, benchContainers) })
	now := t0.Add(benchDays * 24 * time.Hour)
	in := Input{Now: now, Request: Resources{CPUMilli: 500, MemoryBytes: 512 * Mi}, Limit: Resources{CPUMilli: 1000, MemoryBytes: 1024 * Mi}}
	var changed, refused int
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		changed, refused = 0, 0
		for _, s := range passStates {
			r := m.Recommend(s, in)
			if r.Changed {
				changed++
			}
			refused += len(r.Refusals)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchContainers, "ns/container")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/benchContainers, "cpu-ns/container")
	b.ReportMetric(float64(changed)/benchContainers, "changed/container")
	b.ReportMetric(float64(refused)/benchContainers, "refusals/container")
}

// cpuTime is the process's user and system CPU time in nanoseconds: on a
// shared machine it measures the work, where wall time also measures the
// neighbours.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkAddCPU reports the cost of ingesting one CPU sample into a
// container with a spread of about 50 buckets.
func BenchmarkAddCPU(b *testing.B) {
	m := defaultModel(b)
	var s ContainerState
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([]float64, 4096)
	for i := range values {
		values[i] = 0.3 * math.Exp(0.4*rng.NormFloat64())
	}
	i := 0
	for b.Loop() {
		s.AddCPU(m, values[i%len(values)], t0.Add(time.Duration(i)*time.Minute))
		i++
	}
}
