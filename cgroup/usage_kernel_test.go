package cgroup_test

// The usage readers on real cgroup v1 controllers: a child process burns CPU
// and allocates memory in a cgroup, and the readers must agree with the
// kernel's own files and with /proc.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/test/kerneltest"
)

const (
	// usageHelperEnv makes the test binary run usageHelper instead of the
	// tests.
	usageHelperEnv = "KERF_CGROUP_USAGE_HELPER"
	helperAlloc    = 64 << 20
	helperBurn     = 200 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv(usageHelperEnv) == "1" {
		usageHelper()
		return
	}
	os.Exit(m.Run())
}

// usageHelper waits for a line on stdin (its parent has moved it into the
// cgroup by then), allocates and touches helperAlloc bytes, burns helperBurn
// of CPU time, says "done" and holds the memory until stdin closes.
func usageHelper() {
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(2)
	}
	buf := make([]byte, helperAlloc)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	start := processCPU()
	for processCPU()-start < helperBurn {
		for range 100000 {
			buf[0]++
		}
	}
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, in)
	runtime.KeepAlive(buf)
}

// runUsageHelper starts usageHelper, moves it into the cgroup directories
// dirs and returns once it has allocated and burned; it holds its memory
// until it is killed, at the latest when the test ends.
func runUsageHelper(t *testing.T, dirs ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), usageHelperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for _, dir := range dirs {
		kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	}
	_, err = io.WriteString(stdin, "go\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	return cmd
}

// stopHelper stops the helper process pid (SIGSTOP) and waits until its
// cgroup, read through r, uses no more CPU. Its Go runtime goes on using
// CPU after "done" (collector, scavenger): on a loaded VM 12 ms came
// between two reads of its cgroup. Each of its threads stops only when it
// next runs, which on a loaded machine can be long after the main thread
// shows "T" (18 ms more came in one run): so the wait is for two reads
// 50 ms apart that agree. SIGKILL ends it stopped.
func stopHelper(t *testing.T, pid int, r *cgroup.UsageReader) {
	t.Helper()
	require.NoError(t, unix.Kill(pid, unix.SIGSTOP))
	var last time.Duration = -1
	require.Eventually(t, func() bool {
		var u cgroup.Usage
		if err := r.Read(&u); err != nil || procState(t, pid) != "T" {
			return false
		}
		still := u.CPU == last
		last = u.CPU
		return still
	}, time.Minute, 50*time.Millisecond, "helper %d stopped and its cgroup's CPU time still", pid)
}

// procState returns the state letter of pid from /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	return procStat(t, pid)[0]
}

// procStat returns the fields of /proc/<pid>/stat after the command
// (which may hold spaces), from the state on.
func procStat(t *testing.T, pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	return strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
}

// processCPU returns the CPU time this process has used, all threads.
func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// procCPU returns utime+stime of pid from /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	f := procStat(t, pid)
	utime, err := strconv.ParseUint(f[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseUint(f[12], 10, 64)
	require.NoError(t, err)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// procStatusKB returns a "Name:   123 kB" field of /proc/<pid>/status in bytes.
func procStatusKB(t *testing.T, pid int, name string) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// readKernelFile reads a cgroup file with a plain read, apart from the readers.
func readKernelFile(t *testing.T, dir, name string) []byte {
	data, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return data
}

func TestKernelUsageOfABusyProcessMatchesTheKernel(t *testing.T) {
	h, cpuacct := kerneltest.V1Controller(t, "cpuacct")
	_, mem := kerneltest.V1Controller(t, "memory")
	cpuDir := kerneltest.MakeCgroup(t, cpuacct.Path)
	cg := cgroupPath(t, cpuacct, cpuDir)
	memDir := kerneltest.MakeCgroupPath(t, mem.Path, cg)

	r, err := h.OpenUsage(cg)
	require.NoError(t, err)
	defer r.Close()
	var before cgroup.Usage
	require.NoError(t, r.Read(&before))
	assert.Equal(t, cgroup.Usage{PeakAvailable: true}, before, "a new cgroup has used nothing")

	cmd := runUsageHelper(t, cpuDir, memDir)
	pid := cmd.Process.Pid
	stopHelper(t, pid, r)

	var u cgroup.Usage
	require.NoError(t, r.Read(&u))
	t.Logf("after burning %v and touching %d MiB: %+v", helperBurn, helperAlloc>>20, u)

	// CPU: at least the burn, at most what the process used in all (its
	// start ran in the parent cgroup), and what cpuacct.usage says.
	var kernelCPU time.Duration
	require.NoError(t, cgroup.ParseCPUAcctUsage(readKernelFile(t, cpuDir, "cpuacct.usage"), &kernelCPU))
	assert.GreaterOrEqual(t, u.CPU, helperBurn-5*time.Millisecond)
	assert.LessOrEqual(t, u.CPU, procCPU(t, pid)+20*time.Millisecond, "the cgroup holds only the helper")
	assert.GreaterOrEqual(t, kernelCPU, u.CPU)
	assert.InDelta(t, kernelCPU, u.CPU, float64(10*time.Millisecond))

	// Memory: the touched pages are anonymous, never inactive file cache,
	// so the working set holds them all; the peak holds the usage.
	var kernelMem, kernelPeak uint64
	var kernelStat cgroup.MemoryStat
	require.NoError(t, cgroup.ParseValue(readKernelFile(t, memDir, "memory.usage_in_bytes"), &kernelMem))
	require.NoError(t, cgroup.ParseMemoryStatV1(readKernelFile(t, memDir, "memory.stat"), &kernelStat))
	require.NoError(t, cgroup.ParseValue(readKernelFile(t, memDir, "memory.max_usage_in_bytes"), &kernelPeak))
	const slack = 1 << 20
	assert.GreaterOrEqual(t, u.WorkingSet, uint64(helperAlloc))
	assert.LessOrEqual(t, u.WorkingSet, u.Memory)
	assert.LessOrEqual(t, u.WorkingSet, procStatusKB(t, pid, "VmRSS")+16<<20, "the working set is the helper's resident memory and its kernel memory")
	assert.GreaterOrEqual(t, procStatusKB(t, pid, "RssAnon"), uint64(helperAlloc))
	assert.InDelta(t, kernelMem, u.Memory, slack)
	assert.InDelta(t, cgroup.WorkingSet(kernelMem, kernelStat.InactiveFile), u.WorkingSet, slack)
	assert.True(t, u.PeakAvailable)
	assert.GreaterOrEqual(t, u.Peak, u.Memory)
	assert.GreaterOrEqual(t, kernelPeak, u.Peak)
	assert.InDelta(t, kernelPeak, u.Peak, slack)
	assert.Equal(t, u.Peak, cgroup.IntervalPeak(before, u, u.Memory), "the peak grew in this interval")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&u) }))

	// With the helper gone its memory is uncharged, but the peak stays:
	// the next interval's peak comes from the samples.
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	var after cgroup.Usage
	require.NoError(t, r.Read(&after))
	t.Logf("after the helper exited: %+v", after)
	assert.Less(t, after.Memory, uint64(helperAlloc))
	assert.Equal(t, u.Peak, after.Peak)
	assert.GreaterOrEqual(t, after.CPU, u.CPU)
	assert.Equal(t, after.Memory, cgroup.IntervalPeak(u, after, 0))

	kerneltest.RemoveCgroup(t, cpuDir)
	kerneltest.RemoveCgroup(t, memDir)
	err = r.Read(&after)
	assert.ErrorIs(t, err, cgroup.ErrGone)
	assert.NotErrorIs(t, err, cgroup.ErrMalformed)
	_, err = h.OpenUsage(cg)
	assert.ErrorIs(t, err, cgroup.ErrGone)
}

// TestKernelUsageOfABusyProcessMatchesAV2Kernel is the v2 twin of
// TestKernelUsageOfABusyProcessMatchesTheKernel, which reads v1's
// cpuacct and memory files: here cpu.stat's usage_usec, memory.current,
// memory.stat's inactive_file and memory.peak of one unified cgroup. It
// runs in the VM (TestKernelTestsOnCgroupV2InAVM).
func TestKernelUsageOfABusyProcessMatchesAV2Kernel(t *testing.T) {
	h, m := kerneltest.Controller(t, "memory")
	if m.Version != 2 {
		t.Skipf("reads cgroup v2's files; this machine has the memory controller on v%d (TestKernelUsageOfABusyProcessMatchesTheKernel reads v1's; the VM runs this one)", m.Version)
	}
	kerneltest.Controller(t, "cpu")
	dir := kerneltest.MakeCgroup(t, m.Path)
	cg := cgroupPath(t, m, dir)

	r, err := h.OpenUsage(cg)
	require.NoError(t, err)
	defer r.Close()
	var before cgroup.Usage
	require.NoError(t, r.Read(&before))
	assert.True(t, before.PeakAvailable, "6.1 has memory.peak")
	assert.Zero(t, before.CPU, "a new cgroup has used nothing")

	cmd := runUsageHelper(t, dir)
	pid := cmd.Process.Pid
	stopHelper(t, pid, r)

	var u cgroup.Usage
	require.NoError(t, r.Read(&u))
	t.Logf("after burning %v and touching %d MiB: %+v", helperBurn, helperAlloc>>20, u)

	var stat cgroup.CPUStat
	require.NoError(t, cgroup.ParseCPUStat(readKernelFile(t, dir, "cpu.stat"), &stat))
	assert.GreaterOrEqual(t, u.CPU, helperBurn-5*time.Millisecond)
	assert.LessOrEqual(t, u.CPU, procCPU(t, pid)+20*time.Millisecond, "the cgroup holds only the helper")
	assert.GreaterOrEqual(t, stat.Usage, u.CPU)
	assert.InDelta(t, stat.Usage, u.CPU, float64(10*time.Millisecond))

	var kernelMem, kernelPeak uint64
	var kernelStat cgroup.MemoryStat
	require.NoError(t, cgroup.ParseValue(readKernelFile(t, dir, "memory.current"), &kernelMem))
	require.NoError(t, cgroup.ParseMemoryStatV2(readKernelFile(t, dir, "memory.stat"), &kernelStat))
	require.NoError(t, cgroup.ParseValue(readKernelFile(t, dir, "memory.peak"), &kernelPeak))
	const slack = 1 << 20
	assert.GreaterOrEqual(t, u.WorkingSet, uint64(helperAlloc))
	assert.LessOrEqual(t, u.WorkingSet, u.Memory)
	assert.InDelta(t, kernelMem, u.Memory, slack)
	assert.InDelta(t, cgroup.WorkingSet(kernelMem, kernelStat.InactiveFile), u.WorkingSet, slack)
	assert.GreaterOrEqual(t, u.Peak, u.Memory)
	assert.InDelta(t, kernelPeak, u.Peak, slack)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&u) }))

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	var after cgroup.Usage
	require.NoError(t, r.Read(&after))
	assert.Less(t, after.Memory, uint64(helperAlloc))
	assert.Equal(t, u.Peak, after.Peak, "the peak stays once the memory is uncharged")

	kerneltest.RemoveCgroup(t, dir)
	err = r.Read(&after)
	assert.ErrorIs(t, err, cgroup.ErrGone)
}

// usageCgroups makes n real v1 cgroups, each in the cpuacct and the memory
// tree, and opens a cgroup.UsageReader on each.
func usageCgroups(b *testing.B, n int) []*cgroup.UsageReader {
	h, cpuacct := kerneltest.V1Controller(b, "cpuacct")
	_, mem := kerneltest.V1Controller(b, "memory")
	parent := cgroupPath(b, cpuacct, kerneltest.MakeCgroup(b, cpuacct.Path))
	kerneltest.MakeCgroupPath(b, mem.Path, parent)
	readers := make([]*cgroup.UsageReader, n)
	for i := range readers {
		cg := fmt.Sprintf("%s/c%03d", parent, i)
		kerneltest.MakeCgroupPath(b, cpuacct.Path, cg)
		kerneltest.MakeCgroupPath(b, mem.Path, cg)
		r, err := h.OpenUsage(cg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		readers[i] = r
	}
	return readers
}

// BenchmarkReadUsage reads one real v1 cgroup's usage: cpuacct.usage,
// memory.usage_in_bytes, memory.stat and memory.max_usage_in_bytes.
func BenchmarkReadUsage(b *testing.B) {
	r := usageCgroups(b, 1)[0]
	cgroup.BenchReads(b, r)
}

// BenchmarkReadUsage500 is one usage pass over 500 real v1 cgroups, beside
// BenchmarkReadCPUStat500's throttling pass.
func BenchmarkReadUsage500(b *testing.B) {
	const n = 500
	readers := usageCgroups(b, n)
	cgroup.BenchReads(b, readers...)
}
