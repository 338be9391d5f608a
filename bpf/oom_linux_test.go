//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/cgroup"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "KERF_TEST_HELPER"

// victimLimit is the memory limit of the cgroup the OOM victims run in.
const victimLimit = 32 << 20

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "alloc":
		allocHelper()
	case "nocaps":
		startWithoutCapabilities()
	}
	os.Exit(m.Run())
}

// allocHelper waits for a byte on stdin (the parent moves it into the test
// cgroup first), touches $KERF_TEST_BYTES of anonymous memory (default: far
// past victimLimit), reports that on stdout and holds the memory until
// stdin closes.
func allocHelper() {
	size := 8 * victimLimit // far past it, and within a small VM's memory (test/vmtest)
	if s := os.Getenv("KERF_TEST_BYTES"); s != "" {
		var err error
		if size, err = strconv.Atoi(s); err != nil {
			os.Exit(2)
		}
	}
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		os.Exit(2)
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		os.Exit(2)
	}
	for i := 0; i < len(mem); i += os.Getpagesize() {
		mem[i] = 1
	}
	if _, err := os.Stdout.Write(b[:]); err != nil {
		os.Exit(2)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startWithoutCapabilities drops CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON from
// its (locked) thread, starts a tracer and reports the outcome on stdout.
func startWithoutCapabilities() {
	runtime.LockOSThread() // Capabilities are per thread; never unlocked.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		fmt.Print("capget: ", err)
		os.Exit(2)
	}
	for _, c := range []int{unix.CAP_SYS_ADMIN, unix.CAP_BPF, unix.CAP_PERFMON} {
		data[c/32].Effective &^= 1 << (c % 32)
		data[c/32].Permitted &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		fmt.Print("capset: ", err)
		os.Exit(2)
	}
	tr, err := NewOOMTracer(OOMTracerOptions{})
	if err == nil {
		_ = tr.Close()
		fmt.Print("started")
		os.Exit(1)
	}
	fmt.Print(err)
	if !errors.Is(err, ErrPermission) {
		os.Exit(1)
	}
	os.Exit(0)
}

// requireKernel skips tb unless it runs as root on a kernel with BTF.
func requireKernel(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: loads BPF (CAP_BPF, CAP_PERFMON) and writes cgroups; CI runs as root")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		tb.Skipf("kernel has no BTF, CO-RE cannot relocate the tracer: %v", err)
	}
}

// requireTracefs makes sure the oom/mark_victim tracepoint is visible in
// tracefs, which the classic tracepoint hook needs to find its id. It mounts
// tracefs at /sys/kernel/tracing when nothing is mounted (as systemd does at
// boot) and leaves it mounted.
func requireTracefs(tb testing.TB) {
	tb.Helper()
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(filepath.Join(dir, "events/oom/mark_victim")); err == nil {
			return
		}
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		tb.Skipf("tracefs is not mounted and mounting it failed: %v", err)
	}
	if _, err := os.Stat("/sys/kernel/tracing/events/oom/mark_victim"); err != nil {
		tb.Skipf("kernel has no oom/mark_victim tracepoint: %v", err)
	}
}

// testCgroup is a memory cgroup limited to victimLimit and, where the
// cgroup2 hierarchy is mounted, the v2 cgroup its processes join.
type testCgroup struct {
	dir   string
	ino   uint64
	v2dir string
}

// newMemoryCgroup creates a memory cgroup limited to victimLimit, under the
// cgroup v1 memory mount if there is one (plus a cgroup of the same name in
// the cgroup2 hierarchy if mounted), else under cgroup v2, and removes them
// when tb ends.
func newMemoryCgroup(tb testing.TB) testCgroup {
	tb.Helper()
	h, err := cgroup.Detect()
	require.NoError(tb, err)
	memory, hasMemory := h.Controller("memory")
	v2, hasV2 := h.Unified()
	name := fmt.Sprintf("kerf-bpftest-%d-%08x", os.Getpid(), rand.Uint32())
	limit := strconv.Itoa(victimLimit)

	var cg testCgroup
	switch {
	case hasMemory && memory.Version == 1:
		cg.dir = filepath.Join(memory.Path, name)
		require.NoError(tb, os.Mkdir(cg.dir, 0o755))
		tb.Cleanup(func() { removeCgroup(tb, cg.dir) })
		writeFile(tb, filepath.Join(cg.dir, "memory.limit_in_bytes"), limit)
		if _, err := os.Stat(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes")); err == nil {
			writeFile(tb, filepath.Join(cg.dir, "memory.memsw.limit_in_bytes"), limit)
		}
		if hasV2 {
			cg.v2dir = filepath.Join(v2.Path, name)
			require.NoError(tb, os.Mkdir(cg.v2dir, 0o755))
			tb.Cleanup(func() { removeCgroup(tb, cg.v2dir) })
		}
	case hasV2:
		subtree, err := os.ReadFile(filepath.Join(v2.Path, "cgroup.subtree_control"))
		if err == nil && !slices.Contains(strings.Fields(string(subtree)), "memory") {
			// A v2 host whose root does not delegate memory yet (the VM
			// of test/vmtest): enable it for the root's children, as a
			// kubelet does.
			if os.WriteFile(filepath.Join(v2.Path, "cgroup.subtree_control"), []byte("+memory"), 0o644) == nil {
				subtree, err = os.ReadFile(filepath.Join(v2.Path, "cgroup.subtree_control"))
			}
		}
		if err != nil || !slices.Contains(strings.Fields(string(subtree)), "memory") {
			tb.Skipf("cgroup v2 at %s does not delegate the memory controller (cgroup.subtree_control: %q, %v)", v2.Path, subtree, err)
		}
		cg.dir = filepath.Join(v2.Path, name)
		require.NoError(tb, os.Mkdir(cg.dir, 0o755))
		tb.Cleanup(func() { removeCgroup(tb, cg.dir) })
		cg.v2dir = cg.dir
		writeFile(tb, filepath.Join(cg.dir, "memory.max"), limit)
		if _, err := os.Stat(filepath.Join(cg.dir, "memory.swap.max")); err == nil {
			writeFile(tb, filepath.Join(cg.dir, "memory.swap.max"), "0")
		}
	default:
		tb.Skip("no cgroup memory controller mounted (neither v1 memory nor cgroup2)")
	}
	cg.ino, err = cgroup.CgroupID(cg.dir)
	require.NoError(tb, err)
	return cg
}

// removeCgroup removes a cgroup directory, waiting briefly for its dying
// tasks to leave.
func removeCgroup(tb testing.TB, dir string) {
	var err error
	for range 50 {
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Errorf("remove cgroup %s: %v", dir, err)
}

func writeFile(tb testing.TB, path, value string) {
	tb.Helper()
	require.NoError(tb, os.WriteFile(path, []byte(value), 0o644), "write %s", path)
}

// victim is a child process that is moved into a test cgroup and, once
// triggered, touches memory (by default until the OOM killer kills it).
type victim struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	pid    uint32
}

// startVictim starts an allocHelper that will touch size bytes (0: far past
// the limit) and moves it into cg before it allocates.
func startVictim(tb testing.TB, cg testCgroup, size int) *victim {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=alloc", "GOGC=off", "GOMAXPROCS=1")
	if size > 0 {
		cmd.Env = append(cmd.Env, "KERF_TEST_BYTES="+strconv.Itoa(size))
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	v := &victim{cmd: cmd, stdin: stdin, stdout: stdout, pid: uint32(cmd.Process.Pid)}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	writeFile(tb, filepath.Join(cg.dir, "cgroup.procs"), pid)
	if cg.v2dir != "" && cg.v2dir != cg.dir {
		writeFile(tb, filepath.Join(cg.v2dir, "cgroup.procs"), pid)
	}
	return v
}

// trigger lets the victim allocate.
func (v *victim) trigger(tb testing.TB) {
	tb.Helper()
	_, err := v.stdin.Write([]byte{1})
	require.NoError(tb, err)
}

// waitTouched waits until the victim has touched all its memory.
func (v *victim) waitTouched(tb testing.TB) {
	tb.Helper()
	var b [1]byte
	_, err := io.ReadFull(v.stdout, b[:])
	require.NoError(tb, err, "victim %d did not finish touching its memory", v.pid)
}

// requireKilled waits for the victim and checks that SIGKILL ended it.
func (v *victim) requireKilled(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, v.stdin.Close())
	err := v.cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(tb, err, &exit, "victim %d was not killed", v.pid)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(tb, ok)
	require.True(tb, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "victim %d ended with %v, want SIGKILL", v.pid, ws)
}

// readVictimEvent returns the next event about pid, skipping other OOM kills
// on the machine, and when that event arrived on CLOCK_MONOTONIC.
func readVictimEvent(tb testing.TB, tr *OOMTracer, pid uint32, timeout time.Duration) (OOMEvent, uint64) {
	tb.Helper()
	tr.SetDeadline(time.Now().Add(timeout))
	defer tr.SetDeadline(time.Time{})
	for {
		var ev OOMEvent
		err := tr.ReadEvent(&ev)
		now := MonotonicNow()
		require.NoError(tb, err, "no OOM event for victim %d within %v", pid, timeout)
		if ev.PID == pid || ev.TGID == pid {
			return ev, now
		}
	}
}

func TestOOMTracerReportsKillWithVictimCgroups(t *testing.T) {
	requireKernel(t)
	for _, hook := range Hooks() {
		t.Run(string(hook), func(t *testing.T) {
			if hook == HookTracepoint {
				requireTracefs(t)
			}
			tr, err := NewOOMTracer(OOMTracerOptions{Hook: hook})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, tr.Close()) })
			require.Equal(t, hook, tr.Hook())

			cg := newMemoryCgroup(t)
			v := startVictim(t, cg, 0)
			procCgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", v.pid))
			require.NoError(t, err)
			fromProc := OOMEvent{PID: v.pid}
			require.NoError(t, newProcResolver("").resolve(&fromProc))

			before := MonotonicNow()
			v.trigger(t)
			v.requireKilled(t)
			ev, _ := readVictimEvent(t, tr, v.pid, 10*time.Second)
			t.Logf("event: %+v", ev)

			assert.Equal(t, v.pid, ev.PID, "pid")
			assert.Equal(t, v.pid, ev.TGID, "tgid")
			assert.Equal(t, v.pid, ev.TriggerTGID, "the victim ran the memcg OOM killer itself")
			assert.Equal(t, ResolvedInKernel, ev.Resolution)
			assert.Equal(t, truncComm(filepath.Base(os.Args[0])), ev.Comm)
			assert.Equal(t, cg.ino, ev.MemcgID, "memcg id is the inode of %s", cg.dir)
			assert.Greater(t, ev.KtimeNS, before)
			assert.LessOrEqual(t, ev.KtimeNS, MonotonicNow())

			// The v2 id is the inode of the victim's directory in the cgroup2
			// mount (on a v1 host the memory cgroup lives elsewhere).
			h, err := cgroup.Detect()
			require.NoError(t, err)
			if v2, ok := h.Unified(); ok {
				v2Path, _ := parseProcCgroup(procCgroups)
				dir, err := v2.Join(v2Path)
				require.NoError(t, err)
				ino, err := cgroup.CgroupID(dir)
				require.NoError(t, err)
				assert.Equal(t, ino, ev.CgroupID, "cgroup id is the inode of %s", dir)
				require.NotEmpty(t, cg.v2dir)
				ino, err = cgroup.CgroupID(cg.v2dir)
				require.NoError(t, err)
				assert.Equal(t, ino, ev.CgroupID, "cgroup id is the inode of %s", cg.v2dir)
			}

			// The /proc fallback agrees with what the kernel reported.
			assert.Equal(t, ev.TGID, fromProc.TGID)
			assert.Equal(t, ev.Comm, fromProc.Comm)
			assert.Equal(t, ev.CgroupID, fromProc.CgroupID)
			assert.Equal(t, ev.MemcgID, fromProc.MemcgID)

			// Exactly one kill: nothing more arrives about this victim.
			tr.SetDeadline(time.Now().Add(300 * time.Millisecond))
			for {
				var more OOMEvent
				err := tr.ReadEvent(&more)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
				require.NoError(t, err)
				assert.False(t, more.TGID == v.pid || more.MemcgID == cg.ino, "second event for the victim: %+v", more)
			}
			dropped, err := tr.Dropped()
			require.NoError(t, err)
			assert.Zero(t, dropped)
		})
	}
}

// When the OOM killer runs in another process than the victim, tp_btf still
// reads the victim task; the classic tracepoint cannot, and the loader
// resolves the victim from /proc while it is a zombie.
func TestOOMTracerReportsVictimKilledByAnotherProcess(t *testing.T) {
	requireKernel(t)
	for _, hook := range Hooks() {
		t.Run(string(hook), func(t *testing.T) {
			if hook == HookTracepoint {
				requireTracefs(t)
			}
			tr, err := NewOOMTracer(OOMTracerOptions{Hook: hook})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, tr.Close()) })

			// The holder takes half the limit, which leaves room for its Go
			// runtime (CI's VM once OOM-killed a holder of 3/4 before it
			// finished). The allocator's half pushes the cgroup over the
			// limit, and the holder dies: its oom_score_adj of 1000 makes it
			// the OOM killer's choice whatever the two sizes are.
			cg := newMemoryCgroup(t)
			holder := startVictim(t, cg, victimLimit/2)
			writeFile(t, fmt.Sprintf("/proc/%d/oom_score_adj", holder.pid), "1000")
			holder.trigger(t)
			holder.waitTouched(t)
			allocator := startVictim(t, cg, victimLimit/2)
			allocator.trigger(t)

			// The holder is not waited for before the event is read, so its
			// /proc entry outlives it as a zombie.
			ev, _ := readVictimEvent(t, tr, holder.pid, 10*time.Second)
			t.Logf("event: %+v", ev)
			assert.Equal(t, holder.pid, ev.PID, "pid")
			assert.Equal(t, holder.pid, ev.TGID, "tgid")
			assert.Equal(t, allocator.pid, ev.TriggerTGID, "the allocator ran the memcg OOM killer")
			assert.Equal(t, truncComm(filepath.Base(os.Args[0])), ev.Comm)
			var v2ino uint64
			if cg.v2dir != "" {
				v2ino, err = cgroup.CgroupID(cg.v2dir)
				require.NoError(t, err)
			}
			switch {
			case hook == HookBTF || ev.Resolution == ResolvedFromProc:
				want := map[Hook]Resolution{HookBTF: ResolvedInKernel, HookTracepoint: ResolvedFromProc}[hook]
				assert.Equal(t, want, ev.Resolution)
				assert.Equal(t, cg.ino, ev.MemcgID, "memcg id is the inode of %s", cg.dir)
				assert.Equal(t, v2ino, ev.CgroupID, "cgroup id is the inode of %s", cg.v2dir)
			default:
				// On a v1 host /proc stops showing the memory cgroup once the
				// victim starts exiting, which races with reading it: the id
				// is then unknown, never wrong.
				assert.Equal(t, Unresolved, ev.Resolution)
				assert.Contains(t, []uint64{0, cg.ino}, ev.MemcgID)
				assert.Contains(t, []uint64{0, v2ino}, ev.CgroupID)
			}
			holder.requireKilled(t)
		})
	}
}

func truncComm(s string) string {
	if len(s) > 15 {
		return s[:15]
	}
	return s
}

func TestNewOOMTracerPrefersBTFHook(t *testing.T) {
	requireKernel(t)
	tr, err := NewOOMTracer(OOMTracerOptions{})
	require.NoError(t, err)
	defer tr.Close()
	assert.Equal(t, HookBTF, tr.Hook())
}

func TestNewOOMTracerFallsBackToTracepoint(t *testing.T) {
	requireKernel(t)
	requireTracefs(t)
	refuseBTF := func(hook Hook, opts OOMTracerOptions) (*OOMTracer, error) {
		if hook == HookBTF {
			return nil, errors.New("refused for the test")
		}
		return attach(hook, opts)
	}
	tr, err := newOOMTracer(OOMTracerOptions{}, refuseBTF)
	require.NoError(t, err)
	defer tr.Close()
	assert.Equal(t, HookTracepoint, tr.Hook())

	refuseAll := func(hook Hook, opts OOMTracerOptions) (*OOMTracer, error) {
		return nil, fmt.Errorf("refused %s for the test", hook)
	}
	_, err = newOOMTracer(OOMTracerOptions{}, refuseAll)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tp_btf/mark_victim: refused tp_btf/mark_victim for the test")
	assert.Contains(t, err.Error(), "tracepoint/oom/mark_victim: refused tracepoint/oom/mark_victim for the test")
	assert.NotErrorIs(t, err, ErrPermission, "root has the capabilities")
}

func TestNewOOMTracerRejectsUnknownHook(t *testing.T) {
	_, err := NewOOMTracer(OOMTracerOptions{Hook: "kprobe/oom_kill_process"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"kprobe/oom_kill_process"`)
	assert.Contains(t, err.Error(), string(HookBTF))
	assert.Contains(t, err.Error(), string(HookTracepoint))
}

func TestNewOOMTracerNamesMissingCapabilities(t *testing.T) {
	requireKernel(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=nocaps")
	out, err := cmd.Output()
	require.NoError(t, err, "tracer without capabilities: %s", out)
	t.Logf("error without capabilities: %s", out)
	assert.Contains(t, string(out), "CAP_BPF")
	assert.Contains(t, string(out), "CAP_PERFMON")
	assert.Contains(t, string(out), string(HookBTF))
	assert.Contains(t, string(out), string(HookTracepoint))
}

func TestOOMTracerCloseInterruptsReadEvent(t *testing.T) {
	requireKernel(t)
	tr, err := NewOOMTracer(OOMTracerOptions{})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		var ev OOMEvent
		done <- tr.ReadEvent(&ev)
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tr.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, os.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("ReadEvent still blocked after Close")
	}
	assert.NoError(t, tr.Close(), "second Close")
}

func TestOOMTracerReadEventHonoursDeadline(t *testing.T) {
	requireKernel(t)
	tr, err := NewOOMTracer(OOMTracerOptions{})
	require.NoError(t, err)
	defer tr.Close()

	tr.SetDeadline(time.Now().Add(20 * time.Millisecond))
	var ev OOMEvent
	assert.ErrorIs(t, tr.ReadEvent(&ev), os.ErrDeadlineExceeded)
}

// BenchmarkOOMEventLatency measures kernel OOM kill → event in Go: from the
// event's kernel timestamp (bpf_ktime_get_ns at mark_victim) to
// CLOCK_MONOTONIC right after ReadEvent returns. One op is one real OOM kill;
// percentiles are over the b.N kills of the final run (use -benchtime=100x
// for a fixed sample).
func BenchmarkOOMEventLatency(b *testing.B) {
	requireKernel(b)
	tr, err := NewOOMTracer(OOMTracerOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = tr.Close() })
	cg := newMemoryCgroup(b)

	latencies := make([]time.Duration, 0, b.N)
	for b.Loop() {
		b.StopTimer()
		v := startVictim(b, cg, 0)
		b.StartTimer()
		v.trigger(b)
		ev, received := readVictimEvent(b, tr, v.pid, 10*time.Second)
		latencies = append(latencies, time.Duration(received-ev.KtimeNS))
		v.requireKilled(b)
	}
	slices.Sort(latencies)
	ms := func(q float64) float64 {
		return float64(latencies[int(q*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
}
