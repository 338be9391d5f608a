package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/kerneltest"
)

// postChild asks p for a child of mib MiB and returns the status and body.
func postChild(t *testing.T, p *proc, mib int) (int, string) {
	t.Helper()
	resp, err := p.post(t, "/alloc?child=1&mib="+strconv.Itoa(mib))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// childIn waits until p's child reaches state and returns its stats.
func childIn(t *testing.T, p *proc, state string) ChildStats {
	t.Helper()
	var last Stats
	require.Eventually(t, func() bool {
		last = p.stats(t)
		return last.Child != nil && last.Child.State == state
	}, 30*time.Second, 20*time.Millisecond, "the child never became %s: %+v", state, last.Child)
	return *last.Child
}

// residentMiB reads a process's resident set from /proc/<pid>/statm.
func residentMiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "statm"))
	require.NoError(t, err)
	f := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(f), 2)
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize()) >> 20
}

func TestAllocInAChildHoldsTheMemoryOutsideTheParent(t *testing.T) {
	p := start(t)
	code, body := postChild(t, p, 48)
	require.Equal(t, http.StatusAccepted, code, body)

	c := childIn(t, p, childHolding)
	assert.NotEqual(t, p.cmd.Process.Pid, c.PID)
	assert.Equal(t, 48, c.MiB)
	assert.GreaterOrEqual(t, residentMiB(t, c.PID), int64(48), "every page the child allocated is touched")
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.PID), "comm"))
	require.NoError(t, err)
	assert.Equal(t, childComm+"\n", string(comm), "the kernel's reports name the child apart")
	adj, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.PID), "oom_score_adj"))
	require.NoError(t, err)
	assert.Equal(t, "1000\n", string(adj), "the OOM killer's first choice")

	s := p.stats(t)
	assert.Equal(t, 0, s.AllocatedMiB, "the parent allocated nothing")
	assert.Less(t, s.RSSBytes, int64(32<<20), "the parent's RSS does not hold the child's memory")
}

func TestOneChildAtATime(t *testing.T) {
	p := start(t)
	code, body := postChild(t, p, 8)
	require.Equal(t, http.StatusAccepted, code, body)
	first := childIn(t, p, childHolding)

	code, body = postChild(t, p, 8)
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, "a child process runs already")
	assert.Contains(t, body, strconv.Itoa(first.PID), "names the running child")
	assert.Contains(t, body, "POST /free", "says how to end it")

	resp, err := p.post(t, "/free")
	require.NoError(t, err)
	resp.Body.Close()
	ended := p.stats(t).Child
	require.NotNil(t, ended, "the ended child stays in /stats")
	assert.Equal(t, childExited, ended.State, "POST /free answers once the child is gone")
	assert.Equal(t, "signal: killed", ended.Exit)

	code, body = postChild(t, p, 8)
	require.Equal(t, http.StatusAccepted, code, "a new child once the last ended: %s", body)
	assert.NotEqual(t, first.PID, childIn(t, p, childHolding).PID)
}

func TestAChildKilledLeavesTheParentUpAndSaysHow(t *testing.T) {
	p := start(t)
	code, body := postChild(t, p, 8)
	require.Equal(t, http.StatusAccepted, code, body)
	c := childIn(t, p, childHolding)
	require.NoError(t, syscall.Kill(c.PID, syscall.SIGKILL))

	ended := childIn(t, p, childExited)
	assert.Equal(t, "signal: killed", ended.Exit)
	resp, err := http.Get(p.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the parent answers")
}

func TestBadChildParameterIsRefusedNamingIt(t *testing.T) {
	p := start(t)
	resp, err := p.post(t, "/alloc?mib=8&child=yes")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "child")
	assert.Nil(t, p.stats(t).Child, "no child started")
}

// TestAChildPastTheMemoryLimitIsOOMKilledAlone is the v1 kernel's half of
// the child OOM scenario: the OOM killer takes the child, and the parent,
// in the same memory cgroup, goes on.
func TestAChildPastTheMemoryLimitIsOOMKilledAlone(t *testing.T) {
	dir := v1Cgroup(t, "memory")
	kerneltest.WriteFile(t, dir, "memory.limit_in_bytes", strconv.Itoa(48<<20))
	p := start(t)
	kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(p.cmd.Process.Pid))

	code, body := postChild(t, p, 128)
	require.Equal(t, http.StatusAccepted, code, body)
	ended := childIn(t, p, childExited)
	assert.Equal(t, "signal: killed", ended.Exit)
	oc, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	require.NoError(t, err)
	assert.Contains(t, string(oc), "oom_kill 1", "the kernel's OOM killer did it, once")
	select {
	case <-p.done:
		t.Fatalf("the parent died too: %v", p.err)
	default:
	}
	assert.Equal(t, p.cmd.Process.Pid, p.stats(t).PID, "the parent answers")
}
