package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/node/oom"
)

// allocEnv makes the test binary a process that allocates until the OOM
// killer stops it: the child process a container runs and loses, while
// the container itself (its cgroup) stays, as a worker process killed
// under its limit does.
const allocEnv = "KERF_NODE_TEST_ALLOCATE"

// holdEnv makes the test binary a process that waits for a byte on
// stdin (its parent moves it into a cgroup first), touches the number of
// bytes the variable says and then spins: a busy container of known
// memory, whatever the shell of the machine (busybox in the VM).
const holdEnv = "KERF_NODE_TEST_HOLD"

var allocated [][]byte

func init() {
	if n, err := strconv.Atoi(os.Getenv(holdEnv)); err == nil {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		held := make([]byte, n)
		for i := 0; i < len(held); i += 4096 {
			held[i] = 1
		}
		allocated = append(allocated, held)
		for {
			held[0]++
		}
	}
	if os.Getenv(allocEnv) == "" {
		return
	}
	for {
		chunk := make([]byte, 1<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		allocated = append(allocated, chunk)
	}
}

// agentRun is one incarnation of the agent's OOM counting: its sampler,
// its counts, the real cgroup-file OOM source feeding them, and the
// collector that exports them.
type agentRun struct {
	s      *Sampler
	a      *Agent
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func startAgentRun(t *testing.T, k *kernelTree, c Container) *agentRun {
	t.Helper()
	root, err := k.m.Rel(k.parent)
	require.NoError(t, err)
	src, _, err := oom.Open(oom.KindCgroup, oom.Options{Hierarchy: k.h, Root: root, Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	r := &agentRun{s: NewSampler(k.h), reg: prometheus.NewRegistry()}
	r.a = &Agent{sampler: r.s, counts: oom.NewCounts(), source: src}
	require.NoError(t, r.s.Set([]Container{c}))
	r.reg.MustRegister(NewCollector(r.s, r.a.counts))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		_ = src.Run(ctx, r.a.counts.Observe)
	}()
	time.Sleep(200 * time.Millisecond) // Run has started
	return r
}

// pass is one sampling pass of the agent, with its reconciliation.
func (r *agentRun) pass() {
	r.s.Sample(time.Now())
	r.a.reconcileOOM()
}

// stop stops the incarnation, as the agent's process ending does: what it
// held in memory is gone.
func (r *agentRun) stop() {
	r.cancel()
	r.done.Wait()
	_ = r.a.source.Close()
	_ = r.s.Close()
}

// oomEvents reads container_oom_events_total of the container off the
// incarnation's collector (the agent's /metrics).
func (r *agentRun) oomEvents(t *testing.T) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "container_oom_events_total" {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no container_oom_events_total")
	return 0
}

// killChild runs a child process in the memory cgroup memDir that
// allocates past the limit, and returns once the OOM killer has killed it.
func killChild(t *testing.T, memDir string) {
	t.Helper()
	// The shell moves itself into the cgroup, then becomes the child:
	// it allocates only once inside.
	sh := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run='^$'`, "sh", memDir, os.Args[0])
	sh.Env = append(os.Environ(), allocEnv+"=1")
	err := sh.Run()
	require.Error(t, err, "the child must be killed")
	require.Contains(t, err.Error(), "killed", "killed by the OOM killer")
}

// TestKernelOOMKillCountIsAbsoluteAcrossAgentRestarts kills a container's
// child process three times in a real memory cgroup with a 32 MiB limit;
// the container (its cgroup) lives on, so pod status never shows these
// kills. The agent counts the first, then is down (stopped) for the next
// two, and is started afresh: the restarted agent reports 3, the kernel's
// cumulative count, not the 0 its OOM source saw since it started.
func TestKernelOOMKillCountIsAbsoluteAcrossAgentRestarts(t *testing.T) {
	k := newKernelTree(t)
	c, _ := k.add(t, "oomc")
	var memDir, limitFile, swapFile string
	for _, d := range k.dirs("oomc") {
		for _, files := range [][2]string{{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}, {"memory.max", "memory.swap.max"}} {
			if _, err := os.Stat(filepath.Join(d, files[0])); err == nil {
				memDir, limitFile, swapFile = d, files[0], files[1]
			}
		}
	}
	require.NotEmpty(t, memDir, "the container's memory cgroup")
	limit := strconv.Itoa(32 << 20)
	require.NoError(t, os.WriteFile(filepath.Join(memDir, limitFile), []byte(limit), 0))
	swap := limit // v1's memsw counts memory and swap
	if swapFile == "memory.swap.max" {
		swap = "0"
	}
	_ = os.WriteFile(filepath.Join(memDir, swapFile), []byte(swap), 0)

	first := startAgentRun(t, k, c)
	killChild(t, memDir)
	require.Eventually(t, func() bool { first.pass(); return first.a.counts.Count(c.CgroupPath) == 1 },
		10*time.Second, 50*time.Millisecond, "the first agent never counted the kill")
	require.Equal(t, 1.0, first.oomEvents(t))
	first.stop()

	// The agent is down: two more kills.
	killChild(t, memDir)
	killChild(t, memDir)

	second := startAgentRun(t, k, c)
	defer second.stop()
	second.pass()
	require.Equal(t, uint64(3), second.a.counts.Count(c.CgroupPath), "the restarted agent's count is the kernel's absolute count")
	require.Equal(t, 3.0, second.oomEvents(t), "container_oom_events_total")
	latest := second.s.Latest(nil)
	require.Len(t, latest, 1)
	require.True(t, latest[0].HasOOMKills)
	require.Equal(t, uint64(3), latest[0].OOMKills, "the sample carries the absolute count")

	// A kill the restarted agent's source sees is counted once, with the
	// counter.
	killChild(t, memDir)
	require.Eventually(t, func() bool { second.pass(); return second.a.counts.Count(c.CgroupPath) == 4 },
		10*time.Second, 50*time.Millisecond, "the fourth kill")
	time.Sleep(300 * time.Millisecond)
	second.pass()
	require.Equal(t, uint64(4), second.a.counts.Count(c.CgroupPath), "event and counter are one kill")
}
