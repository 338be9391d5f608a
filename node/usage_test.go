package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
)

const mi = 1 << 20

// usageTree is a v1 node of plain files: cpu,cpuacct co-mounted and
// memory, so a sampler reads usage from it without root.
type usageTree struct {
	h        *cgroup.Hierarchy
	cpu, mem string
}

func newUsageTree(t *testing.T) *usageTree {
	dir := t.TempDir()
	u := &usageTree{cpu: filepath.Join(dir, "cpu,cpuacct"), mem: filepath.Join(dir, "memory")}
	u.h = &cgroup.Hierarchy{Mode: cgroup.ModeLegacy, Mounts: []cgroup.Mount{
		{Path: u.cpu, Root: "/", Version: 1, Controllers: []string{"cpu", "cpuacct"}},
		{Path: u.mem, Root: "/", Version: 1, Controllers: []string{"memory"}},
	}}
	return u
}

// write writes cgroupPath's cpu.stat (no throttling), cpuacct.usage and
// memory files: usage and lifetime peak in bytes, and an inactive file
// cache of inactive bytes.
func (u *usageTree) write(t *testing.T, cgroupPath string, cpu time.Duration, usage, peak, inactive uint64) {
	t.Helper()
	files := map[string]string{
		filepath.Join(u.cpu, cgroupPath, "cpu.stat"):                  "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
		filepath.Join(u.cpu, cgroupPath, "cpuacct.usage"):             fmt.Sprintf("%d\n", cpu.Nanoseconds()),
		filepath.Join(u.mem, cgroupPath, "memory.usage_in_bytes"):     fmt.Sprintf("%d\n", usage),
		filepath.Join(u.mem, cgroupPath, "memory.max_usage_in_bytes"): fmt.Sprintf("%d\n", peak),
		filepath.Join(u.mem, cgroupPath, "memory.stat"): fmt.Sprintf("cache %d\nrss %d\ninactive_file %d\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\n",
			inactive, usage-inactive, inactive, inactive, usage-inactive, inactive),
	}
	for path, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
}

func TestSamplerReadsUsageEveryUsageIntervalAndThePeakBetween(t *testing.T) {
	u := newUsageTree(t)
	u.write(t, "/kubepods/a", 2*time.Second, 100*mi, 300*mi, 10*mi)
	s := NewSampler(u.h)
	defer s.Close()
	require.True(t, s.UsageEnabled())
	s.SetUsageInterval(10 * time.Second)
	c := container("a", "/kubepods/a")
	require.NoError(t, s.Set([]Container{c}))
	t0 := time.Unix(1000, 0)

	// The first pass reads usage: the first interval's peak is the
	// kernel's lifetime peak.
	assert.Equal(t, Pass{Read: 1, Changed: 1, Usage: 1}, s.Sample(t0))
	want := report.Sample{Key: c.Key(), At: t0, HasUsage: true,
		Usage: report.Usage{CPU: 2 * time.Second, WorkingSet: 90 * mi, Peak: 300 * mi}}
	assert.Equal(t, []report.Sample{want}, s.Changed(nil))

	// Between usage reads only memory is read: it rises to 200 MiB, below
	// the lifetime peak, and falls back; nothing is sent.
	u.write(t, "/kubepods/a", 3*time.Second, 200*mi, 300*mi, 10*mi)
	assert.Equal(t, Pass{Read: 1}, s.Sample(t0.Add(time.Second)))
	assert.Empty(t, s.Changed(nil))
	u.write(t, "/kubepods/a", 4*time.Second, 120*mi, 300*mi, 20*mi)
	for i := 2; i < 10; i++ {
		assert.Equal(t, Pass{Read: 1}, s.Sample(t0.Add(time.Duration(i)*time.Second)))
	}
	// 10 s on (within the ticker's jitter) usage is due: the interval's
	// peak is the 200 MiB sampled, since the kernel's did not grow.
	at := t0.Add(10*time.Second - time.Millisecond)
	assert.Equal(t, Pass{Read: 1, Changed: 1, Usage: 1}, s.Sample(at))
	want = report.Sample{Key: c.Key(), At: at, HasUsage: true,
		Usage: report.Usage{CPU: 4 * time.Second, WorkingSet: 100 * mi, Peak: 200 * mi}}
	assert.Equal(t, []report.Sample{want}, s.Changed(nil))

	// A kernel peak that grew is the interval's peak, exactly.
	u.write(t, "/kubepods/a", 5*time.Second, 150*mi, 450*mi, 20*mi)
	s.Sample(at.Add(time.Second))
	at = at.Add(10 * time.Second)
	assert.Equal(t, Pass{Read: 1, Changed: 1, Usage: 1}, s.Sample(at))
	assert.Equal(t, report.Usage{CPU: 5 * time.Second, WorkingSet: 130 * mi, Peak: 450 * mi}, s.Changed(nil)[0].Usage)
	assert.Equal(t, SamplerStats{Samples: 13, UsageReads: 3, Tracked: 1}, s.Stats())

	// A container added between usage passes is read in full at once.
	u.write(t, "/kubepods/b", time.Second, 10*mi, 12*mi, 0)
	b := container("b", "/kubepods/b")
	require.NoError(t, s.Add(b))
	assert.Equal(t, Pass{Read: 2, Changed: 1, Usage: 1}, s.Sample(at.Add(time.Second)))
	assert.Equal(t, b.Key(), s.Changed(nil)[0].Key)
}

func TestSamplerKeepsCountersWhenUsageFilesAreMissing(t *testing.T) {
	u := newUsageTree(t)
	u.write(t, "/kubepods/a", time.Second, 10*mi, 10*mi, 0)
	require.NoError(t, os.RemoveAll(filepath.Join(u.mem, "kubepods", "a")))
	s := NewSampler(u.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a")}))
	p := s.Sample(time.Unix(1, 0))
	assert.Equal(t, 1, p.Read, "cpu.stat is read")
	assert.Equal(t, 1, p.Errors)
	assert.ErrorIs(t, p.Err, cgroup.ErrGone)
	assert.Equal(t, Pass{Read: 1}, s.Sample(time.Unix(2, 0)), "usage is not tried again")
	assert.False(t, s.Latest(nil)[0].HasUsage)
}

func TestSamplerWithoutMemoryControllerReadsNoUsage(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 1, 0, 0)
	s := NewSampler(f.h)
	defer s.Close()
	assert.False(t, s.UsageEnabled())
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a")}))
	assert.Equal(t, Pass{Read: 1, Changed: 1}, s.Sample(time.Unix(1, 0)))
	assert.False(t, s.Latest(nil)[0].HasUsage)
}

func TestCollectorExportsCadvisorUsageSeries(t *testing.T) {
	u := newUsageTree(t)
	u.write(t, "/kubepods/a", 2500*time.Millisecond, 100*mi, 300*mi, 10*mi)
	s := NewSampler(u.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a")}))
	s.Sample(time.Unix(1, 0))
	// The kernel's lifetime peak is exported, as cadvisor does, not the
	// interval's peak the stream carries.
	u.write(t, "/kubepods/a", 3*time.Second, 120*mi, 300*mi, 10*mi)
	s.Sample(time.Unix(2, 0))
	c := NewCollector(s, nil)
	want := `
# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="a",cpu="total",namespace="default",pod="web-0"} 3
# HELP container_memory_max_usage_bytes Maximum memory usage recorded in bytes
# TYPE container_memory_max_usage_bytes gauge
container_memory_max_usage_bytes{container="a",namespace="default",pod="web-0"} 3.145728e+08
# HELP container_memory_working_set_bytes Current working set in bytes.
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="a",namespace="default",pod="web-0"} 1.15343360e+08
# HELP kerf_agent_usage_reads_total Full usage readings (CPU, memory, memory.stat, peak) the sampler made.
# TYPE kerf_agent_usage_reads_total counter
kerf_agent_usage_reads_total 2
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_max_usage_bytes",
		"kerf_agent_usage_reads_total"))
}
