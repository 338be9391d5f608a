package main

// Tests run the real program: a binary built once per package, started as
// a process, driven through its HTTP endpoint; the OOM and throttling tests
// put it in real v1 cgroups (root only, skipped with the reason otherwise).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kerf-workload-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "kerf-workload")
	cmd := exec.Command("go", "build", "-o", binary, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build kerf-workload: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running kerf-workload.
type proc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	err  error // of Wait, once done is closed
}

// start runs kerf-workload with args plus --listen on a free loopback port
// and waits until /healthz answers.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := &proc{cmd: exec.Command(binary, append(args, "--listen", addr)...), url: "http://" + addr, done: make(chan struct{})}
	p.cmd.Stderr = os.Stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "kerf-workload never answered /healthz")
	return p
}

func (p *proc) post(t *testing.T, path string) (*http.Response, error) {
	t.Helper()
	return http.Post(p.url+path, "", nil)
}

func (p *proc) stats(t *testing.T) Stats {
	t.Helper()
	resp, err := http.Get(p.url + "/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var s Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

// wait returns the process's exit status once it exits.
func (p *proc) wait(t *testing.T) *exec.ExitError {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("kerf-workload did not exit")
	}
	var ee *exec.ExitError
	require.True(t, errors.As(p.err, &ee), "exit error %v", p.err)
	return ee
}

func TestCrashAfterExitsWithTheExitCode(t *testing.T) {
	cmd := exec.Command(binary, "--crash-after", "100ms", "--exit-code", "3", "--listen", "")
	err := cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "exit error %v", err)
	assert.Equal(t, 3, ee.ExitCode())
}

func TestCrashEndpointExitsWithTheCode(t *testing.T) {
	p := start(t)
	resp, err := p.post(t, "/crash?code=7")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Equal(t, 7, p.wait(t).ExitCode())
}

func TestBadParametersAreRefusedNamingTheParameter(t *testing.T) {
	p := start(t)
	for _, path := range []string{"/alloc?mib=-1", "/alloc", "/burn?millicores=x", "/crash?code=256"} {
		t.Run(path, func(t *testing.T) {
			resp, err := p.post(t, path)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}
	assert.Equal(t, 0, p.stats(t).AllocatedMiB, "a refused request changes nothing")
}

func TestBadFlagsAreRefusedNamingTheFlag(t *testing.T) {
	for _, args := range [][]string{{"--alloc-mib=-1"}, {"--burn-millicores=-5"}, {"--exit-code=300"}} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: exit error %v", args, err)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
		flagName := strings.SplitN(strings.TrimPrefix(args[0], "--"), "=", 2)[0]
		assert.Contains(t, string(out), "--"+flagName, "%v", args)
	}
}

func TestAllocKeepsTouchedMemoryAndFreeReturnsIt(t *testing.T) {
	p := start(t, "--alloc-mib", "8")
	assert.Equal(t, 8, p.stats(t).AllocatedMiB)
	resp, err := p.post(t, "/alloc?mib=64")
	require.NoError(t, err)
	resp.Body.Close()
	s := p.stats(t)
	assert.Equal(t, 72, s.AllocatedMiB)
	assert.GreaterOrEqual(t, s.RSSBytes, int64(72<<20), "every allocated page is touched, so resident")
	resp, err = p.post(t, "/free")
	require.NoError(t, err)
	resp.Body.Close()
	f := p.stats(t)
	assert.Equal(t, 0, f.AllocatedMiB)
	assert.Less(t, f.RSSBytes, int64(32<<20), "freed memory goes back to the kernel")
}

// v1Cgroup makes a cgroup in this machine's v1 hierarchy of controller, or
// skips the test.
func v1Cgroup(t *testing.T, controller string) string {
	t.Helper()
	_, m := kerneltest.V1Controller(t, controller)
	return kerneltest.MakeCgroup(t, m.Path)
}

func TestAllocPastTheMemoryLimitIsOOMKilled(t *testing.T) {
	dir := v1Cgroup(t, "memory")
	kerneltest.WriteFile(t, dir, "memory.limit_in_bytes", strconv.Itoa(48<<20))
	p := start(t)
	kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(p.cmd.Process.Pid))

	resp, err := p.post(t, "/alloc?mib=128")
	if err == nil {
		resp.Body.Close()
	}
	ee := p.wait(t)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by SIGKILL, got %v", ws)
	oc, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	require.NoError(t, err)
	assert.Contains(t, string(oc), "oom_kill 1", "the kernel's OOM killer did it")
}

func TestBurnIsThrottledUnderACFSQuota(t *testing.T) {
	dir := v1Cgroup(t, "cpu")
	kerneltest.WriteFile(t, dir, "cpu.cfs_period_us", "100000")
	kerneltest.WriteFile(t, dir, "cpu.cfs_quota_us", "10000") // 10% of a CPU
	p := start(t)
	kerneltest.WriteFile(t, dir, "cgroup.procs", strconv.Itoa(p.cmd.Process.Pid))
	resp, err := p.post(t, "/burn?millicores=500")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 500, p.stats(t).BurnMillicores)

	stat := func() (periods, throttled int) {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			n, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "nr_periods":
				periods = n
			case "nr_throttled":
				throttled = n
			}
		}
		return periods, throttled
	}
	require.Eventually(t, func() bool { n, _ := stat(); return n >= 20 }, 30*time.Second, 50*time.Millisecond)
	periods, throttled := stat()
	// 500m asked under a 100m quota: most periods end throttled.
	assert.Greater(t, throttled, periods/2, "nr_throttled %d of nr_periods %d", throttled, periods)

	resp, err = p.post(t, "/burn?millicores=0")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 0, p.stats(t).BurnMillicores)
}
