package oom

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

// BenchmarkOOMKillToEvent measures, for each OOM source that runs here, the
// time from a real OOM kill to the event reaching Go. The clock starts at
// the kernel's timestamp of the kill, taken by the BPF hook (the other
// sources have no timestamp of their own that precise), and stops when the
// source's emit runs. It makes 20 kills, half a second apart so the kernel's
// rate limit on its OOM report (10 per 5 s) does not hold the kernel log
// back, and reports p50 and p99 per source in milliseconds.
func BenchmarkOOMKillToEvent(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skipf("needs root to create cgroups and load BPF: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	if err != nil {
		b.Fatal(err)
	}
	const kills = 20
	root, p, dir := memoryCgroup(b, h)

	type seen struct {
		mu    sync.Mutex
		at    []uint64 // monotonic ns when emit ran, one per kill
		times []uint64 // KernelNS as the source reported it
	}
	sources := map[string]*seen{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, kind := range []string{KindBPF, KindCgroup, KindKmsg} {
		src, _, err := Open(kind, Options{Hierarchy: h, Root: root, Interval: time.Second})
		if err != nil {
			b.Logf("%s cannot run here: %v", kind, err)
			continue
		}
		s := &seen{}
		sources[kind] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer src.Close()
			_ = src.Run(ctx, func(k Kill) {
				now := bpf.MonotonicNow()
				if k.Cgroup != p {
					return
				}
				s.mu.Lock()
				s.at = append(s.at, now)
				s.times = append(s.times, k.KernelNS)
				s.mu.Unlock()
			})
		}()
	}
	ref, ok := sources[KindBPF]
	if !ok {
		cancel()
		b.Skip("the BPF source, whose kernel timestamps are the reference, cannot run here")
	}
	time.Sleep(200 * time.Millisecond)
	b.ResetTimer()
	for i := range kills {
		oomKill(b, dir)
		deadline := time.Now().Add(2 * time.Second)
		for _, s := range sources {
			for time.Now().Before(deadline) {
				s.mu.Lock()
				n := len(s.at)
				s.mu.Unlock()
				if n > i {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.StopTimer()
	cancel()
	wg.Wait()

	ref.mu.Lock()
	kernel := slices.Clone(ref.times)
	ref.mu.Unlock()
	for kind, s := range sources {
		if len(s.at) != kills || len(kernel) != kills {
			b.Logf("%s: saw %d of %d kills", kind, len(s.at), kills)
			continue
		}
		lat := make([]float64, kills)
		for i := range kills {
			lat[i] = float64(s.at[i]-kernel[i]) / 1e6
		}
		slices.Sort(lat)
		b.ReportMetric(lat[kills/2], kind+"-p50-ms")
		b.ReportMetric(lat[kills*99/100], kind+"-p99-ms")
		b.Logf("%s: OOM kill -> event in Go over %d kills: p50 %.2f ms, p99 %.2f ms, max %.2f ms", kind, kills, lat[kills/2], lat[kills*99/100], lat[kills-1])
	}
}
