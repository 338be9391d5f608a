package cgroup_test

// Tests on the real kernel: they create cgroups, so they need root (CI runs
// as root) and skip with the reason otherwise.

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/test/kerneltest"
)

// cgroupPath returns the cgroup path of dir, a directory of mount m.
func cgroupPath(tb testing.TB, m cgroup.Mount, dir string) string {
	tb.Helper()
	p, err := m.Rel(dir)
	require.NoError(tb, err)
	return p
}

// TestKernelCPUStatCountsThrottlingOfABusyLoop runs on cgroup v1 here and
// on v2 in the VM (TestKernelTestsOnCgroupV2InAVM): cpu.stat's
// nr_periods, nr_throttled and throttled_time (v1, ns) or throttled_usec
// (v2) read the same.
func TestKernelCPUStatCountsThrottlingOfABusyLoop(t *testing.T) {
	h, m := kerneltest.Controller(t, "cpu")
	dir := kerneltest.MakeCgroup(t, m.Path)
	cg := cgroupPath(t, m, dir)
	p, err := h.Path("cpu", cg)
	require.NoError(t, err)
	require.Equal(t, dir, p)
	r, err := h.OpenCPUStat(cg)
	require.NoError(t, err)
	defer r.Close()
	var s cgroup.CPUStat
	require.NoError(t, r.Read(&s))
	assert.Zero(t, s.Periods, "a new cgroup has no periods")
	assert.Zero(t, s.Throttled)
	// Read before the quota is set: setting it starts the period timer,
	// which counts a period or two even with nothing to run before it
	// stops (kernel/sched/fair.c, do_sched_cfs_period_timer; 2 periods
	// 300 ms after the write here), and a read 100 ms late saw nr_periods
	// 1 in a loaded VM.
	const period = 100 * time.Millisecond
	kerneltest.SetCPUQuota(t, m, dir, 20*time.Millisecond, period) // 20% of a CPU

	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	// The loop runs until the kernel has counted 27 periods, 3 s of them
	// on a quiet machine. On a busy one a period in which the loop never
	// ran is not counted, so the wait is for the count, not for 3 s.
	const minPeriods = 27
	start := time.Now()
	require.Eventually(t, func() bool {
		require.NoError(t, r.Read(&s))
		return s.Periods >= minPeriods
	}, time.Minute, period, "a busy cgroup counts its periods")
	elapsed := time.Since(start)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed = true

	// With the loop dead the period timer stops after at most two more
	// periods; then the counters hold still and the reader must agree with
	// a plain read of the file.
	var want cgroup.CPUStat
	for range 20 {
		time.Sleep(period)
		var again cgroup.CPUStat
		require.NoError(t, r.Read(&s))
		data, err := os.ReadFile(r.Path())
		require.NoError(t, err)
		require.NoError(t, cgroup.ParseCPUStat(data, &want))
		require.NoError(t, r.Read(&again))
		if s == again {
			break
		}
	}
	t.Logf("after %v at 20%% quota: %+v", elapsed, s)
	assert.Equal(t, want, s)
	assert.Positive(t, s.Throttled)
	assert.Positive(t, s.ThrottledTime)
	assert.LessOrEqual(t, s.Throttled, s.Periods)
	assert.GreaterOrEqual(t, s.Periods, uint64(minPeriods), "a busy cgroup counts every period")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&s) }))
}

func TestKernelReaderReportsRemovedCgroupAsGone(t *testing.T) {
	_, m := kerneltest.Controller(t, "cpu")
	dir := kerneltest.MakeCgroup(t, m.Path)
	r, err := cgroup.OpenCPUStat(dir)
	require.NoError(t, err)
	defer r.Close()
	var s cgroup.CPUStat
	require.NoError(t, r.Read(&s))

	require.NoError(t, syscall.Rmdir(dir))
	err = r.Read(&s)
	assert.ErrorIs(t, err, cgroup.ErrGone)
	assert.ErrorIs(t, err, syscall.ENODEV)
	assert.Contains(t, err.Error(), r.Path())

	_, err = cgroup.OpenCPUStat(dir)
	assert.ErrorIs(t, err, cgroup.ErrGone)
}

// TestKernelOOMControlReadsAV1MemoryCgroup is v1's: memory.oom_control
// has no v2 file. Its v2 twin is TestKernelMemoryEventsCountAV2OOMKill.
func TestKernelOOMControlReadsAV1MemoryCgroup(t *testing.T) {
	h, m := kerneltest.V1Controller(t, "memory")
	dir := kerneltest.MakeCgroup(t, m.Path)

	kills, err := h.OpenOOMKills(cgroupPath(t, m, dir))
	require.NoError(t, err)
	defer kills.Close()
	assert.IsType(t, &cgroup.OOMControlReader{}, kills)
	n, err := kills.OOMKills()
	require.NoError(t, err)
	assert.Zero(t, n)

	r, err := cgroup.OpenOOMControl(dir)
	require.NoError(t, err)
	defer r.Close()
	var c, want cgroup.OOMControl
	require.NoError(t, r.Read(&c))
	data, err := os.ReadFile(r.Path())
	require.NoError(t, err)
	require.NoError(t, cgroup.ParseOOMControl(data, &want))
	assert.Equal(t, want, c)
	assert.Equal(t, cgroup.OOMControl{}, c)

	// Writing 1 to memory.oom_control turns the OOM killer off (v1 only).
	kerneltest.WriteFile(t, dir, "memory.oom_control", "1")
	require.NoError(t, r.Read(&c))
	assert.Equal(t, cgroup.OOMControl{KillDisabled: true}, c)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&c) }))
}

// TestKernelMemoryEventsCountAV2OOMKill is v2's: the memory controller
// counts OOM kills in memory.events (oom_kill), which a kubelet's v2 node
// has and v1 lacks (TestKernelOOMControlReadsAV1MemoryCgroup is its v1
// twin). It runs in the VM (TestKernelTestsOnCgroupV2InAVM). A helper
// process touches 64 MiB in a cgroup of memory.max 32 MiB: the kernel
// kills it, and the reader the agent opens for the cgroup counts it.
func TestKernelMemoryEventsCountAV2OOMKill(t *testing.T) {
	h, m := kerneltest.Controller(t, "memory")
	if m.Version != 2 {
		t.Skipf("memory.events is cgroup v2's; this machine has the memory controller on v%d (TestKernelOOMControlReadsAV1MemoryCgroup reads v1's; the VM runs this one)", m.Version)
	}
	dir := kerneltest.MakeCgroup(t, m.Path)
	kerneltest.WriteFile(t, dir, "memory.max", strconv.Itoa(helperAlloc/2))
	kerneltest.WriteFile(t, dir, "memory.swap.max", "0")
	kills, err := h.OpenOOMKills(cgroupPath(t, m, dir))
	require.NoError(t, err)
	defer kills.Close()
	require.IsType(t, &cgroup.MemoryEventsReader{}, kills)
	n, err := kills.OOMKills()
	require.NoError(t, err)
	require.Zero(t, n, "a new cgroup has no OOM kill")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), usageHelperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	_, err = fmt.Fprintln(stdin, "go")
	require.NoError(t, err)
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the helper is killed")
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())

	n, err = kills.OOMKills()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), n, "memory.events counts the kill")
	r, err := cgroup.OpenMemoryEvents(dir)
	require.NoError(t, err)
	defer r.Close()
	var e cgroup.MemoryEvents
	require.NoError(t, r.Read(&e))
	t.Logf("memory.events after the kill: %+v", e)
	assert.Positive(t, e.OOM, "the limit was hit")
}

func TestKernelIDIndexMapsCgroupIDsToPaths(t *testing.T) {
	h, m := kerneltest.Controller(t, "memory")
	trees := map[string]cgroup.Mount{fmt.Sprintf("v%d memory", m.Version): m}
	if u, ok := h.Unified(); ok && u.Path != m.Path {
		trees["v2"] = u
	}
	for name, m := range trees {
		t.Run(name, func(t *testing.T) {
			parent := kerneltest.MakeCgroup(t, m.Path)
			a := kerneltest.MakeCgroup(t, parent)
			x, err := cgroup.NewIDIndex(parent)
			require.NoError(t, err)
			assert.Equal(t, 2, x.Len())

			idA, err := cgroup.CgroupID(a)
			require.NoError(t, err)
			p, ok := x.Lookup(idA)
			assert.True(t, ok)
			assert.Equal(t, a, p)

			b := kerneltest.MakeCgroup(t, parent)
			idB, err := cgroup.CgroupID(b)
			require.NoError(t, err)
			p, ok = x.Lookup(idB)
			assert.True(t, ok, "a cgroup made after the walk is found by the rescan on a miss")
			assert.Equal(t, b, p)

			// The inode number is the kernfs id that BPF reports; the file
			// handle of a cgroup directory carries the same id.
			if fh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, b, 0); err == nil && len(fh.Bytes()) == 8 {
				assert.Equal(t, idB, binary.NativeEndian.Uint64(fh.Bytes()))
			} else {
				t.Logf("cannot cross-check the id with name_to_handle_at: %v", err)
			}

			require.NoError(t, syscall.Rmdir(b))
			require.NoError(t, x.Refresh())
			assert.Equal(t, 2, x.Len(), "the walk found it gone")
			p, ok = x.Lookup(idB)
			assert.True(t, ok, "a removed cgroup is still named for cgroup.IDRetention")
			assert.Equal(t, b, p)
		})
	}
}

// BenchmarkReadCPUStat reads and parses one real cgroup's cpu.stat.
func BenchmarkReadCPUStat(b *testing.B) {
	_, m := kerneltest.V1Controller(b, "cpu")
	r, err := cgroup.OpenCPUStat(kerneltest.MakeCgroup(b, m.Path))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	cgroup.BenchReads(b, r)
}

// BenchmarkReadCPUStat500 is one sampling pass over 500 real cgroups, the
// figure docs/design.md section 10 sets at under 1 ms.
func BenchmarkReadCPUStat500(b *testing.B) {
	const n = 500
	_, m := kerneltest.V1Controller(b, "cpu")
	parent := kerneltest.MakeCgroup(b, m.Path)
	readers := make([]*cgroup.CPUStatReader, n)
	for i := range readers {
		dir := filepath.Join(parent, fmt.Sprintf("c%03d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { kerneltest.RemoveCgroup(b, dir) })
		r, err := cgroup.OpenCPUStat(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		readers[i] = r
	}
	cgroup.BenchReads(b, readers...)
}
