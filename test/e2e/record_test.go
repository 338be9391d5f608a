package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/internal/scenario"
	"github.com/kerf-dev/kerf/test/quality"
)

// The recordings' length and step, and how often the agent is read.
const (
	recordFor   = 10 * time.Minute
	recordStep  = 10 * time.Second
	recordEvery = 2 * time.Second
)

// recording is a real workload driven through a load pattern while its
// agent's counters make a trace of it.
type recording struct {
	name, about string
	w           scenario.Workload
	manifest    quality.Values
	// drive is told each step's index as it starts, and sets the load.
	drive func(ctx context.Context, e *scenario.Env, pod *corev1.Pod, step int) error
}

// recordings are the patterns make record-traces records.
var recordings = []recording{{
	name:     "sandbox-heap",
	about:    "Recorded on the sandbox: kerf-workload at 0.1 cores whose heap grows 8 MiB every 10 s and is freed every 2.5 minutes, as the agent read it.",
	w:        scenario.Workload{Name: "rec-heap", CPURequest: "100m", CPULimit: "500m", MemoryRequest: "128Mi", MemoryLimit: "256Mi", Args: []string{"--burn-millicores=100"}},
	manifest: quality.Values{CPURequest: 100, CPULimit: 500, MemoryRequest: 128 * quality.Mi, MemoryLimit: 256 * quality.Mi},
	drive: func(ctx context.Context, e *scenario.Env, pod *corev1.Pod, step int) error {
		if step%15 == 14 {
			return e.Control(ctx, pod, "free", "")
		}
		return e.Control(ctx, pod, "alloc", "mib=8")
	},
}, {
	name:     "sandbox-bursts",
	about:    "Recorded on the sandbox: kerf-workload under a 300m CPU limit at 0.05 cores, asking 0.6 cores for 20 s of every minute and throttled then, as the agent read it.",
	w:        scenario.Workload{Name: "rec-bursts", CPURequest: "100m", CPULimit: "300m", MemoryRequest: "64Mi", MemoryLimit: "128Mi", Args: []string{"--burn-millicores=50"}},
	manifest: quality.Values{CPURequest: 100, CPULimit: 300, MemoryRequest: 64 * quality.Mi, MemoryLimit: 128 * quality.Mi},
	drive: func(ctx context.Context, e *scenario.Env, pod *corev1.Pod, step int) error {
		switch step % 6 {
		case 0:
			return e.Control(ctx, pod, "burn", "millicores=600")
		case 2:
			return e.Control(ctx, pod, "burn", "millicores=50")
		}
		return nil
	},
}}

// TestRecordTraces is make record-traces: it drives real workloads on the
// sandbox through the patterns of recordings for ten minutes, reads their
// usage and CFS counters from the agent every two seconds, and writes
// each as a trace (test/quality's format) into the directory
// KERF_RECORD_TRACES names, where make bench-quality replays them.
func TestRecordTraces(t *testing.T) {
	dir := os.Getenv("KERF_RECORD_TRACES")
	if dir == "" {
		t.Skip("records only when KERF_RECORD_TRACES names the directory to write to (make record-traces): ten minutes of the sandbox that make test does not spend")
	}
	in := cluster(t)
	e := env(t, in)
	var wg sync.WaitGroup
	traces := make([]*quality.Trace, len(recordings))
	errs := make([]error, len(recordings))
	for i, r := range recordings {
		wg.Go(func() { traces[i], errs[i] = record(t.Context(), e, r) })
	}
	wg.Wait()
	for i, r := range recordings {
		require.NoError(t, errs[i], r.name)
		tr := traces[i]
		path := filepath.Join(dir, r.name+".csv")
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, quality.WriteTrace(f, tr))
		require.NoError(t, f.Close())
		t.Logf("wrote %s: %d samples of %s", path, len(tr.Samples), tr.Step)
	}

	// What the agent read is what the workloads did.
	low, high := traces[0].Samples[0].Memory, 0.0
	for _, s := range traces[0].Samples {
		low, high = min(low, s.Memory), max(high, s.Memory)
	}
	assert.Greater(t, high-low, float64(80*quality.Mi), "the heap's growth of 112 MiB between frees is in the recording (%.0f to %.0f MiB)", low/quality.Mi, high/quality.Mi)
	var throttled int
	for _, s := range traces[1].Samples {
		if s.Burst > 0 {
			throttled++
		}
	}
	assert.GreaterOrEqual(t, throttled, len(traces[1].Samples)/6, "the bursts over the 300m limit were throttled: samples with throttled periods")
}

// record deploys r's workload, drives it through its pattern for
// recordFor and returns the trace the agent's readings make.
func record(ctx context.Context, e *scenario.Env, r recording) (*quality.Trace, error) {
	pod, err := e.Deploy(ctx, r.w)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"namespace": e.Namespace, "pod": pod.Name, "container": scenario.Container}
	start := time.Now()
	rec := quality.NewRecorder(r.name, r.about, start, recordStep, r.manifest)
	var periods, throttled float64
	read := false
	tick := time.NewTicker(recordEvery)
	defer tick.Stop()
	step := -1
	for now := start; now.Sub(start) < recordFor; now = time.Now() {
		if i := int(now.Sub(start) / recordStep); i > step {
			step = i
			if err := r.drive(ctx, e, pod, step); err != nil {
				return nil, fmt.Errorf("%s: step %d: %w", r.name, step, err)
			}
		}
		m, err := e.AgentMetricsOn(ctx, pod.Spec.NodeName)
		if err != nil {
			return nil, fmt.Errorf("%s: reading the agent: %w", r.name, err)
		}
		at := time.Now()
		cpu := scenario.Sum(m, "container_cpu_usage_seconds_total", labels)
		rec.AddUsage(signals.UsageSample{At: at, CPU: time.Duration(cpu * float64(time.Second)), WorkingSet: uint64(scenario.Sum(m, "container_memory_working_set_bytes", labels))})
		p, th := scenario.Sum(m, "container_cpu_cfs_periods_total", labels), scenario.Sum(m, "container_cpu_cfs_throttled_periods_total", labels)
		switch {
		case !read: // counted before the recording: a baseline
		case p < periods: // the container restarted
			rec.AddCFS(at, int64(p), int64(th), r.manifest.CPULimit)
		default:
			rec.AddCFS(at, int64(p-periods), int64(th-throttled), r.manifest.CPULimit)
		}
		periods, throttled, read = p, th, true
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	return rec.Trace()
}
