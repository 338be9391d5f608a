package cgroup

// Tests on the real kernel: they create cgroups, so they need root (CI runs
// as root) and skip with the reason otherwise.

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// v1Controller returns this machine's hierarchy and the mount of a cgroup v1
// controller, or skips the test.
func v1Controller(tb testing.TB, controller string) (*Hierarchy, Mount) {
	tb.Helper()
	if uid := os.Geteuid(); uid != 0 {
		tb.Skipf("needs root to create cgroups: running as uid %d", uid)
	}
	h, err := Detect()
	if err != nil {
		tb.Skipf("cannot read this machine's cgroups: %v", err)
	}
	m, ok := h.Controller(controller)
	if !ok {
		tb.Skipf("the cgroup v1 %s controller is not mounted (cgroup mode %s)", controller, h.Mode)
	}
	if m.Version != 1 {
		tb.Skipf("needs the cgroup v1 %s controller: this machine has it on cgroup v2 (mode %s)", controller, h.Mode)
	}
	return h, m
}

// cgroupPath returns the cgroup path of dir, a directory of mount m.
func cgroupPath(tb testing.TB, m Mount, dir string) string {
	tb.Helper()
	p, err := m.Rel(dir)
	require.NoError(tb, err)
	return p
}

func TestKernelCPUStatCountsThrottlingOfABusyLoop(t *testing.T) {
	h, m := v1Controller(t, "cpu")
	dir := kerneltest.MakeCgroup(t, m.Path)
	cg := cgroupPath(t, m, dir)
	p, err := h.Path("cpu", cg)
	require.NoError(t, err)
	require.Equal(t, dir, p)
	const period = 100 * time.Millisecond
	kerneltest.WriteFile(t, dir, "cpu.cfs_period_us", "100000")
	kerneltest.WriteFile(t, dir, "cpu.cfs_quota_us", "20000") // 20% of a CPU

	r, err := h.OpenCPUStat(cg)
	require.NoError(t, err)
	defer r.Close()
	var s CPUStat
	require.NoError(t, r.Read(&s))
	assert.Equal(t, CPUStat{}, s, "a new cgroup has no periods")

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
	start := time.Now()
	time.Sleep(3 * time.Second)
	elapsed := time.Since(start)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed = true

	// With the loop dead the period timer stops after at most two more
	// periods; then the counters hold still and the reader must agree with
	// a plain read of the file.
	var want CPUStat
	for range 20 {
		time.Sleep(period)
		var again CPUStat
		require.NoError(t, r.Read(&s))
		data, err := os.ReadFile(r.Path())
		require.NoError(t, err)
		require.NoError(t, ParseCPUStat(data, &want))
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
	minPeriods := uint64(elapsed/period) - 3
	assert.GreaterOrEqual(t, s.Periods, minPeriods, "a busy cgroup counts every period")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&s) }))
}

func TestKernelReaderReportsRemovedCgroupAsGone(t *testing.T) {
	_, m := v1Controller(t, "cpu")
	dir := kerneltest.MakeCgroup(t, m.Path)
	r, err := OpenCPUStat(dir)
	require.NoError(t, err)
	defer r.Close()
	var s CPUStat
	require.NoError(t, r.Read(&s))

	require.NoError(t, syscall.Rmdir(dir))
	err = r.Read(&s)
	assert.ErrorIs(t, err, ErrGone)
	assert.ErrorIs(t, err, syscall.ENODEV)
	assert.Contains(t, err.Error(), r.Path())

	_, err = OpenCPUStat(dir)
	assert.ErrorIs(t, err, ErrGone)
}

func TestKernelOOMControlReadsAV1MemoryCgroup(t *testing.T) {
	h, m := v1Controller(t, "memory")
	dir := kerneltest.MakeCgroup(t, m.Path)

	kills, err := h.OpenOOMKills(cgroupPath(t, m, dir))
	require.NoError(t, err)
	defer kills.Close()
	assert.IsType(t, &OOMControlReader{}, kills)
	n, err := kills.OOMKills()
	require.NoError(t, err)
	assert.Zero(t, n)

	r, err := OpenOOMControl(dir)
	require.NoError(t, err)
	defer r.Close()
	var c, want OOMControl
	require.NoError(t, r.Read(&c))
	data, err := os.ReadFile(r.Path())
	require.NoError(t, err)
	require.NoError(t, ParseOOMControl(data, &want))
	assert.Equal(t, want, c)
	assert.Equal(t, OOMControl{}, c)

	// Writing 1 to memory.oom_control turns the OOM killer off (v1 only).
	kerneltest.WriteFile(t, dir, "memory.oom_control", "1")
	require.NoError(t, r.Read(&c))
	assert.Equal(t, OOMControl{KillDisabled: true}, c)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&c) }))
}

func TestKernelIDIndexMapsCgroupIDsToPaths(t *testing.T) {
	h, m := v1Controller(t, "memory")
	trees := map[string]Mount{"v1 memory": m}
	if u, ok := h.Unified(); ok {
		trees["v2"] = u
	}
	for name, m := range trees {
		t.Run(name, func(t *testing.T) {
			parent := kerneltest.MakeCgroup(t, m.Path)
			a := kerneltest.MakeCgroup(t, parent)
			x, err := NewIDIndex(parent)
			require.NoError(t, err)
			assert.Equal(t, 2, x.Len())

			idA, err := CgroupID(a)
			require.NoError(t, err)
			p, ok := x.Lookup(idA)
			assert.True(t, ok)
			assert.Equal(t, a, p)

			b := kerneltest.MakeCgroup(t, parent)
			idB, err := CgroupID(b)
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
			_, ok = x.Lookup(idB)
			assert.False(t, ok)
		})
	}
}
