package oom

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

// TestKmsgKillOfAProcessThatNamedItselfStaysInItsCgroup kills a real
// process in a real memory cgroup after it named itself "/..,task=x" (a
// process picks its own command name, and the kernel writes it into the
// OOM report's line between the cgroup and the pid) and checks that the
// kernel log source reads the kill in that cgroup, with that name and pid.
// cadvisor's oomparser, which this source used before, matched the report
// with greedy patterns: it read the cgroup "<cgroup>,task=/..", which is
// not the container's (and a longer name could climb to another cgroup).
func TestKmsgKillOfAProcessThatNamedItselfStaysInItsCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups and read /dev/kmsg: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	require.NoError(t, err)
	root, p, dir := memoryCgroup(t, h)
	src, _, err := Open(KindKmsg, Options{Hierarchy: h, Root: root})
	if err != nil {
		t.Skipf("the kernel log cannot be read here: %v", err)
	}
	const comm = "/..,task=x"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var kills []Kill
	var child atomic.Int64
	done := make(chan error, 1)
	go func() {
		defer src.Close()
		done <- src.Run(ctx, func(k Kill) {
			if int64(k.PID) != child.Load() {
				return // another process's kill on this machine
			}
			mu.Lock()
			kills = append(kills, k)
			mu.Unlock()
		})
	}()
	time.Sleep(200 * time.Millisecond) // let Run start: kills before it are not delivered

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", commEnv+"="+comm)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	child.Store(int64(pid))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
	_, err = stdin.Write([]byte{1})
	require.NoError(t, err)
	require.Error(t, cmd.Wait(), "the child must be killed")

	count := func() int { mu.Lock(); defer mu.Unlock(); return len(kills) }
	assert.Eventually(t, func() bool { return count() >= 1 }, 10*time.Second, 20*time.Millisecond, "the kernel log source saw no kill of pid %d", child.Load())
	cancel()
	require.NoError(t, <-done)
	require.Len(t, kills, 1)
	k := kills[0]
	assert.Equal(t, comm, k.Comm)
	assert.Equal(t, p, k.Cgroup, "the kill is in the process's cgroup")
	assert.Equal(t, testPodUID, k.PodUID)
	assert.Equal(t, testContainerID, k.ContainerID)
}
