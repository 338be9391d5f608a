package oom

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/test/kerneltest"
)

// childEnv makes the test binary a process that waits for a byte on stdin
// and then allocates until the OOM killer stops it.
const childEnv = "KERF_OOM_TEST_CHILD"

// commEnv, when set, is the command name the child gives itself first.
const commEnv = "KERF_OOM_TEST_COMM"

func TestMain(m *testing.M) {
	if root := os.Getenv(seccompChildEnv); root != "" {
		openUnderSeccomp(root)
	}
	if os.Getenv(childEnv) == "1" {
		if comm := os.Getenv(commEnv); comm != "" {
			_ = os.WriteFile("/proc/self/comm", []byte(comm), 0)
		}
		allocateForever()
	}
	os.Exit(m.Run())
}

// kept holds the child's allocations, so they stay reachable.
var kept [][]byte

func allocateForever() {
	var b [1]byte
	_, _ = os.Stdin.Read(b[:])
	for {
		chunk := make([]byte, 1<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		kept = append(kept, chunk)
	}
}

// Names of the pod and container whose cgroup the tests kill in.
const (
	testPodUID      = "6f1c9e2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
	testContainerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// memoryCgroup creates a memory cgroup shaped like a pod container's under
// the cgroupfs driver (<test root>/kubepods/burstable/pod<uid>/<id>) with a
// 32 MiB limit, and returns the test root, the container's cgroup path and
// its directory.
func memoryCgroup(t testing.TB, h *cgroup.Hierarchy) (root, p, dir string) {
	t.Helper()
	mem, ok := h.Controller("memory")
	if !ok {
		t.Skip("the memory cgroup controller is not mounted here")
	}
	root = fmt.Sprintf("/kerf-oomtest-%d", rand.Uint32())
	p = root + "/kubepods/burstable/pod" + testPodUID + "/" + testContainerID
	var dirs []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		dir, err := mem.Join(d)
		require.NoError(t, err)
		dirs = append(dirs, dir)
	}
	require.NoError(t, os.MkdirAll(dirs[0], 0o755))
	t.Cleanup(func() {
		for _, dir := range dirs { // deepest first
			kerneltest.RemoveCgroup(t, dir)
		}
	})
	dir = dirs[0]
	if mem.Version == 2 {
		// v2 gives a cgroup the memory files only where its parent
		// delegates the controller, as a kubelet's slices do down to the
		// container (the VM of test/vmtest).
		kerneltest.WriteFile(t, mem.Path, "cgroup.subtree_control", "+memory")
		for _, d := range slices.Backward(dirs[1:]) { // the top first
			kerneltest.WriteFile(t, d, "cgroup.subtree_control", "+memory")
		}
	}
	limitMemory(t, mem, dir)
	return root, p, dir
}

// limitMemory gives the memory cgroup dir a 32 MiB limit, and no swap.
func limitMemory(t testing.TB, mem cgroup.Mount, dir string) {
	t.Helper()
	limit := []byte(strconv.Itoa(32 << 20))
	if mem.Version == 2 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.max"), limit, 0))
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	} else {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), limit, 0))
		_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), limit, 0)
	}
}

// oomKill runs a child in dir that allocates past the limit and returns its
// pid once the OOM killer has killed it.
func oomKill(t testing.TB, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
	_, err = stdin.Write([]byte{1})
	require.NoError(t, err)
	err = cmd.Wait()
	require.Error(t, err, "the child must be killed")
	return pid
}

// TestEachSourceReportsOneRealOOMKill kills a real process in a real memory
// cgroup and checks that every OOM source that can run here reports exactly
// that kill, resolved to the cgroup.
func TestEachSourceReportsOneRealOOMKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups and load BPF: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	require.NoError(t, err)
	root, p, dir := memoryCgroup(t, h)
	id, err := cgroup.CgroupID(dir)
	require.NoError(t, err)

	type run struct {
		name, detail string
		mu           sync.Mutex
		kills        []Kill
	}
	configs := []struct {
		name string
		kind string
		hook string
	}{
		{"bpf/tp_btf", KindBPF, "tp_btf/mark_victim"},
		{"bpf/tracepoint", KindBPF, "tracepoint/oom/mark_victim"},
		{"cgroup", KindCgroup, ""},
		{"kmsg", KindKmsg, ""},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var runs []*run
	for _, c := range configs {
		src, _, err := Open(c.kind, Options{Hierarchy: h, Root: root, BPFHook: c.hook, Interval: 200 * time.Millisecond})
		if err != nil {
			t.Logf("%s cannot run here, not tested: %v", c.name, err)
			continue
		}
		r := &run{name: c.name, detail: src.Detail()}
		runs = append(runs, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer src.Close()
			err := src.Run(ctx, func(k Kill) {
				if k.Cgroup != p {
					return // another cgroup's kill on this machine
				}
				r.mu.Lock()
				r.kills = append(r.kills, k)
				r.mu.Unlock()
			})
			assert.NoError(t, err, c.name)
		}()
	}
	require.NotEmpty(t, runs, "no OOM source can run here")
	time.Sleep(200 * time.Millisecond) // let Run start: kills before it are not delivered

	pid := oomKill(t, dir)
	start := time.Now()
	count := func(r *run) int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.kills) }
	for _, r := range runs {
		assert.Eventually(t, func() bool { return count(r) >= 1 }, 10*time.Second, 20*time.Millisecond, "%s saw no kill", r.name)
	}
	// Give a duplicate the time to show up.
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			t.Logf("%s: %s", r.name, r.detail)
			require.Len(t, r.kills, 1, "exactly one report")
			k := r.kills[0]
			assert.Equal(t, uint64(1), k.Count)
			assert.Equal(t, p, k.Cgroup)
			assert.Equal(t, id, k.CgroupID, "cgroup id is the directory's inode")
			assert.WithinDuration(t, start, k.Time, 5*time.Second)
			if r.name != "cgroup" { // the counters carry no pid
				assert.Equal(t, pid, k.PID)
			}
			assert.Equal(t, testPodUID, k.PodUID)
			assert.Equal(t, testContainerID, k.ContainerID)
		})
	}
}

func TestOpenRejectsAnUnknownKind(t *testing.T) {
	_, _, err := Open("ebpf", Options{Hierarchy: &cgroup.Hierarchy{}, Root: "/"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `oom-source "ebpf": must be one of auto, bpf, cgroup, kmsg`)
}

// TestKillsBeforeTheSourceStartedAreNotDelivered kills first, then starts
// the sources that could see that kill again (the kernel log replays from
// boot; the cgroup file keeps its count) and checks neither reports it.
func TestKillsBeforeTheSourceStartedAreNotDelivered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	require.NoError(t, err)
	root, p, dir := memoryCgroup(t, h)
	oomKill(t, dir)
	kills, err := h.OpenOOMKills(p)
	require.NoError(t, err)
	defer kills.Close()
	n, err := kills.OOMKills()
	require.NoError(t, err)
	require.Equal(t, uint64(1), n, "the kernel counted the kill")

	for _, kind := range []string{KindKmsg, KindCgroup} {
		t.Run(kind, func(t *testing.T) {
			src, _, err := Open(kind, Options{Hierarchy: h, Root: root, Interval: 100 * time.Millisecond})
			if err != nil {
				t.Skipf("%s cannot run here: %v", kind, err)
			}
			defer src.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			var got []Kill
			require.NoError(t, src.Run(ctx, func(k Kill) {
				if k.Cgroup == p {
					got = append(got, k)
				}
			}))
			assert.Empty(t, got, "a kill from before the source started was delivered")
		})
	}
}

// TestABPFKillReadAfterItsCgroupWentNamesItsContainer: a container
// created after the source opened is OOM-killed, and its cgroup removed
// (it restarted), before the source reads the kill: the agent, starved on
// a busy node, reads late. The kill still names the container: the
// source's walks found its cgroup while it existed, and the index keeps a
// removed cgroup's name (cgroup.IDRetention). Before, the only walk came
// on the lookup's miss, after the cgroup was gone, and the kill named
// none (seen in the VM node's e2e test under load).
func TestABPFKillReadAfterItsCgroupWentNamesItsContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups and load BPF: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	require.NoError(t, err)
	root, p, first := memoryCgroup(t, h)
	opened, _, err := Open(KindBPF, Options{Hierarchy: h, Root: root, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Skipf("the BPF source cannot run here: %v", err)
	}
	defer opened.Close()
	src := opened.(*bpfSource)

	// The container's next instance: a new cgroup beside the first.
	const restarted = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	p = path.Join(path.Dir(p), restarted)
	dir := filepath.Join(filepath.Dir(first), restarted)
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { kerneltest.RemoveCgroup(t, dir) })
	mem, _ := h.Controller("memory")
	limitMemory(t, mem, dir)
	id, err := cgroup.CgroupID(dir)
	require.NoError(t, err)
	live := src.ids.Len()
	require.Eventually(t, func() bool { return src.ids.Len() > live }, time.Minute, 20*time.Millisecond, "a walk found the new cgroup")

	pid := oomKill(t, dir)
	kerneltest.RemoveCgroup(t, dir)
	require.Eventually(t, func() bool { return src.ids.Len() == live }, time.Minute, 20*time.Millisecond, "a walk found it gone")

	ctx, cancel := context.WithCancel(context.Background())
	kills := make(chan Kill, 16)
	ran := make(chan error, 1)
	go func() {
		ran <- src.Run(ctx, func(k Kill) {
			if k.PID == pid {
				kills <- k
			}
		})
	}()
	defer func() {
		cancel()
		assert.NoError(t, <-ran)
	}()
	select {
	case k := <-kills:
		assert.Equal(t, p, k.Cgroup)
		assert.Equal(t, id, k.CgroupID)
		assert.Equal(t, testPodUID, k.PodUID)
		assert.Equal(t, restarted, k.ContainerID, "the instance killed, not the one before")
	case <-time.After(time.Minute):
		t.Fatal("the source never read the kill")
	}
}
