package node

// Tests and benchmarks on the real kernel: they create cgroups in the v1 cpu
// hierarchy here, and in the v2 tree in the VM (TestKernelSamplerOnCgroupV2InAVM),
// so they need root (CI runs as root) and skip with the reason otherwise.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/memtest"
)

// kernelTree is a temporary parent cgroup in this machine's v1 cpu
// hierarchy, and at the same path in its cpuacct and memory hierarchies
// (where the usage is), as the kubelet makes a container's cgroups.
type kernelTree struct {
	h      *cgroup.Hierarchy
	m      cgroup.Mount
	parent string // directory, in m
	// others are the parent's directories in the cpuacct and memory
	// hierarchies that are not m.
	others []string
}

// newKernelTree makes kerf-sampler-<rand> in the v1 cpu, cpuacct and memory
// hierarchies, or in the v2 tree, removed with its children when the test
// ends, or skips the test.
//
// On cgroup v2 (the VM of test/vmtest) the one tree holds every
// controller: the parent delegates cpu and memory to its children, as a
// kubelet's pod cgroup does to its containers.
func newKernelTree(tb testing.TB) *kernelTree {
	tb.Helper()
	h, m := kerneltest.Controller(tb, "cpu")
	if m.Version == 2 {
		kerneltest.Controller(tb, "memory")
	}
	name := fmt.Sprintf("kerf-sampler-%08x", rand.Uint32())
	k := &kernelTree{h: h, m: m, parent: filepath.Join(m.Path, name)}
	require.NoError(tb, os.Mkdir(k.parent, 0o755))
	tb.Cleanup(func() { kerneltest.RemoveCgroup(tb, k.parent) })
	if m.Version == 2 {
		kerneltest.WriteFile(tb, k.parent, "cgroup.subtree_control", "+cpu +memory")
		return k
	}
	for _, ctrl := range []string{"cpuacct", "memory"} {
		_, o := kerneltest.V1Controller(tb, ctrl)
		if o.Path == m.Path || slices.Contains(k.others, filepath.Join(o.Path, name)) {
			continue
		}
		dir := filepath.Join(o.Path, name)
		require.NoError(tb, os.Mkdir(dir, 0o755))
		tb.Cleanup(func() { kerneltest.RemoveCgroup(tb, dir) })
		k.others = append(k.others, dir)
	}
	return k
}

// add makes a child cgroup (in each hierarchy) and returns a container
// whose cgroup it is, and its directory in the cpu hierarchy; they are
// removed (before the parent) when the test ends.
func (k *kernelTree) add(tb testing.TB, name string) (Container, string) {
	tb.Helper()
	for _, o := range k.others {
		d := filepath.Join(o, name)
		require.NoError(tb, os.Mkdir(d, 0o755))
		tb.Cleanup(func() { kerneltest.RemoveCgroup(tb, d) })
	}
	dir := filepath.Join(k.parent, name)
	require.NoError(tb, os.Mkdir(dir, 0o755))
	tb.Cleanup(func() { kerneltest.RemoveCgroup(tb, dir) })
	p, err := k.m.Rel(dir)
	require.NoError(tb, err)
	c := container(name, p)
	c.Pod = "pod-" + name
	return c, dir
}

// dirs returns the directories of the child cgroup name in every
// hierarchy, the cpu one first.
func (k *kernelTree) dirs(name string) []string {
	out := []string{filepath.Join(k.parent, name)}
	for _, o := range k.others {
		out = append(out, filepath.Join(o, name))
	}
	return out
}

// countersOnly makes s read no usage, for the tests of the throttling
// counters alone.
func countersOnly(s *Sampler) *Sampler {
	s.openUsage = nil
	return s
}

// readCPUStat parses dir's cpu.stat with a plain read.
func readCPUStat(t *testing.T, dir string) cgroup.CPUStat {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	require.NoError(t, err)
	var s cgroup.CPUStat
	require.NoError(t, cgroup.ParseCPUStat(data, &s))
	return s
}

func TestKernelSamplerSeesThrottlingOfABusyLoop(t *testing.T) {
	k := newKernelTree(t)
	const n = 4
	var cs []Container
	var dirs []string
	for i := range n {
		c, dir := k.add(t, fmt.Sprintf("c%d", i))
		cs, dirs = append(cs, c), append(dirs, dir)
	}
	busy := dirs[0]
	kerneltest.SetCPUQuota(t, k.m, busy, 20*time.Millisecond, 100*time.Millisecond) // 20% of a CPU

	s := countersOnly(NewSampler(k.h))
	defer s.Close()
	require.NoError(t, s.Set(cs))
	require.Equal(t, Pass{Read: n, Changed: n}, s.Sample(time.Now()))

	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	kerneltest.WriteFile(t, busy, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	time.Sleep(2 * time.Second)
	p := s.Sample(time.Now())
	assert.Equal(t, Pass{Read: n, Changed: 1}, p, "only the busy cgroup changed")
	changed := s.Changed(nil)
	require.Len(t, changed, 1)
	assert.Equal(t, cs[0].Key(), changed[0].Key)
	assert.Positive(t, changed[0].Throttled)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed = true
	// With the loop dead the period timer stops after at most two more
	// periods; then the counters hold still and the sampler must agree with
	// a plain read of the file.
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		if s.Sample(time.Now()).Changed == 0 {
			break
		}
	}
	latest := map[report.ContainerKey]report.Sample{}
	for _, smp := range s.Latest(nil) {
		latest[smp.Key] = smp
	}
	require.Len(t, latest, n)
	for i, c := range cs {
		want := readCPUStat(t, dirs[i])
		want.Usage = 0 // v2's cpu.stat has the usage too, which countersOnly does not read
		got := latest[c.Key()]
		assert.Equal(t, want, cgroup.CPUStat{Periods: got.Periods, Throttled: got.Throttled, ThrottledTime: got.ThrottledTime}, c.Name)
	}
	b := latest[cs[0].Key()]
	t.Logf("busy loop at 20%% quota for 2 s: %+v", b)
	assert.Positive(t, b.Throttled)
	assert.Positive(t, b.ThrottledTime)
	assert.Zero(t, latest[cs[1].Key()].Periods, "an idle cgroup has no periods")

	// The collector exports the same values under the container's labels.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(s, fakeOOM{cs[0].CgroupPath: 1}))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	type series struct{ name, ns, pod, container string }
	got := map[series]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			got[series{mf.GetName(), l["namespace"], l["pod"], l["container"]}] = v
		}
	}
	for i, c := range cs {
		want := readCPUStat(t, dirs[i])
		at := func(name string) float64 { return got[series{name, c.Namespace, c.Pod, c.Name}] }
		assert.Equal(t, float64(want.Periods), at("container_cpu_cfs_periods_total"), c.Name)
		assert.Equal(t, float64(want.Throttled), at("container_cpu_cfs_throttled_periods_total"), c.Name)
		assert.Equal(t, want.ThrottledTime.Seconds(), at("container_cpu_cfs_throttled_seconds_total"), c.Name)
	}
	assert.Equal(t, float64(1), got[series{"container_oom_events_total", cs[0].Namespace, cs[0].Pod, cs[0].Name}])
	assert.Equal(t, float64(n), got[series{name: "kerf_agent_tracked_containers"}])
	assert.Zero(t, got[series{name: "kerf_agent_read_errors_total"}])
}

func TestKernelSamplerDropsRemovedCgroupWithoutError(t *testing.T) {
	k := newKernelTree(t)
	a, _ := k.add(t, "a")
	b, bdir := k.add(t, "b")
	s := countersOnly(NewSampler(k.h))
	defer s.Close()
	require.NoError(t, s.Set([]Container{a, b}))
	require.Equal(t, Pass{Read: 2, Changed: 2}, s.Sample(time.Now()))

	kerneltest.RemoveCgroup(t, bdir)
	p := s.Sample(time.Now())
	assert.Equal(t, Pass{Read: 1, Gone: 1}, p)
	assert.Len(t, s.Latest(nil), 2, "a gone container keeps its last sample until the next Set")
	require.NoError(t, s.Set([]Container{a, b}), "discovery may list it once more")
	assert.Equal(t, []string{"a"}, keysOf(s.Latest(nil)))
	assert.Equal(t, Pass{Read: 1, Gone: 1}, s.Sample(time.Now()))
	require.NoError(t, s.Set([]Container{a}))
	assert.Equal(t, SamplerStats{Samples: 4, Gone: 2, Tracked: 1}, s.Stats())
}

// TestKernelSamplerReadsUsageAsTheKernelReports runs a process that holds
// 30 MB and spins in a real cgroup (v1 cpu, cpuacct, memory, or v2) and checks the
// sampler's usage and the collector's series against the kernel's files
// read right after.
func TestKernelSamplerReadsUsageAsTheKernelReports(t *testing.T) {
	k := newKernelTree(t)
	c, _ := k.add(t, "u")
	dirs := k.dirs("u")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"=30000000")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for _, d := range dirs {
		kerneltest.WriteFile(t, d, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	}
	_, err = stdin.Write([]byte{1})
	require.NoError(t, err)
	s := NewSampler(k.h)
	defer s.Close()
	require.True(t, s.UsageEnabled())
	require.NoError(t, s.Set([]Container{c}))
	time.Sleep(2 * time.Second)
	p := s.Sample(time.Now())
	require.NoError(t, p.Err)
	require.Equal(t, Pass{Read: 1, Changed: 1, Usage: 1}, p)
	got := s.Latest(nil)[0]
	require.True(t, got.HasUsage)

	read := func(name string) uint64 {
		t.Helper()
		for _, d := range dirs {
			data, err := os.ReadFile(filepath.Join(d, name))
			if err != nil {
				continue
			}
			if name == "memory.stat" {
				parse := cgroup.ParseMemoryStatV1
				if k.m.Version == 2 {
					parse = cgroup.ParseMemoryStatV2
				}
				var st cgroup.MemoryStat
				require.NoError(t, parse(data, &st))
				return st.InactiveFile
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
			require.NoError(t, err)
			return v
		}
		t.Fatalf("no %s in %v", name, dirs)
		return 0
	}
	var cpu, mem, inactive, peak uint64
	if k.m.Version == 2 {
		cpu, mem, inactive, peak = uint64(readCPUStat(t, dirs[0]).Usage), read("memory.current"), read("memory.stat"), read("memory.peak")
	} else {
		cpu, mem, inactive, peak = read("cpuacct.usage"), read("memory.usage_in_bytes"), read("memory.stat"), read("memory.max_usage_in_bytes")
	}
	t.Logf("sampler %+v; kernel after: CPU %d ns, memory %d, inactive file %d, peak %d", got.Usage, cpu, mem, inactive, peak)
	assert.GreaterOrEqual(t, cpu, uint64(got.Usage.CPU), "CPU time only grows")
	assert.Less(t, cpu-uint64(got.Usage.CPU), uint64(200*time.Millisecond), "read moments apart")
	assert.Greater(t, got.Usage.CPU, 10*time.Millisecond, "the loop spun (for what a loaded machine gave it)")
	assert.Greater(t, got.Usage.WorkingSet, uint64(25e6), "the helper holds 30 MB")
	assert.InDelta(t, float64(cgroup.WorkingSet(mem, inactive)), float64(got.Usage.WorkingSet), 2<<20, "the working set holds still")
	assert.Equal(t, peak, got.Usage.Peak, "the first report's peak is the kernel's")
	assert.GreaterOrEqual(t, got.Usage.Peak, got.Usage.WorkingSet)

	// The collector exports them under cadvisor's names.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(s, nil))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			values[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, got.Usage.CPU.Seconds(), values["container_cpu_usage_seconds_total"])
	assert.Equal(t, float64(got.Usage.WorkingSet), values["container_memory_working_set_bytes"])
	assert.Equal(t, float64(peak), values["container_memory_max_usage_bytes"])
}

func TestKernelSamplerPassDoesNotAllocate(t *testing.T) {
	k := newKernelTree(t)
	var cs []Container
	for i := range 20 {
		c, _ := k.add(t, fmt.Sprintf("c%02d", i))
		cs = append(cs, c)
	}
	s := NewSampler(k.h)
	defer s.Close()
	require.NoError(t, s.Set(cs))
	s.Sample(time.Now())
	now := time.Now()
	assert.Zero(t, testing.AllocsPerRun(100, func() { s.Sample(now) }), "every pass reads usage")
	s.SetUsageInterval(time.Hour)
	assert.Zero(t, testing.AllocsPerRun(100, func() { s.Sample(now) }), "every pass reads memory usage alone")
}

// sampler330 makes 330 real cgroups, the containers of a node with 110
// pods (docs/design.md section 5), and a sampler tracking them.
func sampler330(b *testing.B) (*Sampler, []Container) {
	b.Helper()
	k := newKernelTree(b)
	cs := make([]Container, 0, 330)
	for i := range 330 {
		c, _ := k.add(b, fmt.Sprintf("c%03d", i))
		c.Pod, c.Name = fmt.Sprintf("pod-%03d", i/3), fmt.Sprintf("c%d", i%3)
		c.PodUID = fmt.Sprintf("%032x", i/3)
		cs = append(cs, c)
	}
	s := NewSampler(k.h)
	b.Cleanup(func() { s.Close() })
	require.NoError(b, s.Set(cs))
	require.Equal(b, 330, s.Sample(time.Now()).Read)
	return s, cs
}

// BenchmarkSamplePass330 is one sampling pass over 330 real cgroups: of the
// throttling counters alone (counters), with each container's memory usage
// (memory: the passes between usage reads), and with its usage in full
// (usage: CPU, memory, memory.stat and peak, every usage interval).
func BenchmarkSamplePass330(b *testing.B) {
	for _, kind := range []string{"counters", "memory", "usage"} {
		b.Run(kind, func(b *testing.B) {
			s, _ := sampler330(b)
			switch kind {
			case "counters":
				countersOnly(s)
			case "memory":
				s.SetUsageInterval(time.Hour)
			}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if p := s.Sample(now); p.Read != 330 || p.Errors != 0 {
					b.Fatalf("pass read %d of 330: %v", p.Read, p.Err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*330), "ns/container")
		})
	}
}

// BenchmarkAgentBudget330 runs the agent's sampling as it runs on a node
// with 330 containers: a pass every second for 10 s and a scrape (gather and
// text encoding) after each, and reports the CPU time used as a percentage
// of one core (and per pass, scrape included) and the process's peak and
// current RSS, for the budget of
// docs/design.md section 5 (≤ 1% of a core, ≤ 30 MiB). Run it with
// -benchtime=1x; the RSS includes the test binary's own.
func BenchmarkAgentBudget330(b *testing.B) {
	const (
		interval = time.Second
		passes   = 10
	)
	s, _ := sampler330(b)
	s.SetUsageInterval(DefaultUsageInterval)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(s, fakeOOM{}))
	for b.Loop() {
		scrape(b, reg)
		cpu0, wall0 := cpuTime(b), time.Now()
		t := time.NewTicker(interval)
		for range passes {
			now := <-t.C
			if p := s.Sample(now); p.Read != 330 {
				b.Fatalf("pass read %d of 330: %v", p.Read, p.Err)
			}
			scrape(b, reg)
		}
		t.Stop()
		cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%core")
		b.ReportMetric(float64(cpu.Microseconds())/passes, "cpu-µs/pass")
	}
	b.ReportMetric(memtest.MiB(memtest.Status(b, 0, "VmHWM")), "MiB-maxRSS")
	b.ReportMetric(memtest.MiB(memtest.Status(b, 0, "VmRSS")), "MiB-RSS")
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrape330 is one scrape of the collector over 330 real cgroups:
// gather and text encoding.
func BenchmarkScrape330(b *testing.B) {
	s, _ := sampler330(b)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(s, fakeOOM{}))
	b.ReportAllocs()
	for b.Loop() {
		scrape(b, reg)
	}
}

// scrape gathers reg and encodes it as Prometheus' text format does for a
// scrape of /metrics.
func scrape(b *testing.B, reg *prometheus.Registry) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			b.Fatal(err)
		}
	}
}
