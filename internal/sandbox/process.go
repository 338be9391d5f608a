package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// component is one process of the sandbox.
type component struct {
	name   string
	binary string
	args   []string
}

// process is a component started by this Up: exited closes when it ends.
type process struct {
	pid    int
	exited chan struct{}
	err    error
}

// errExited is what waiting on a component says when its process ended.
var errExited = errors.New("exited")

// start runs c detached from the caller (own session, so it outlives the
// CLI and no terminal signal reaches it), output to its log file, PID to
// its PID file.
func start(l layout, c component) (*process, error) {
	logf, err := os.OpenFile(l.logFile(c.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", c.name, err)
	}
	defer logf.Close()
	cmd := exec.Command(c.binary, c.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = l.state
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// A component must not inherit the caller's proxy settings or
	// kubeconfig: everything it needs is on its command line.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", c.name, c.binary, err)
	}
	p := &process{pid: cmd.Process.Pid, exited: make(chan struct{})}
	// Reap the child when it ends, so a dead component is not left a
	// zombie that looks alive while this process runs (tests, Up itself).
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := os.WriteFile(l.pidFile(c.name), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("write PID file of %s: %w", c.name, err)
	}
	return p, nil
}

// readPID returns the PID in name's PID file, 0 when there is none.
func readPID(l layout, name string) int {
	raw, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return 0
	}
	return pid
}

// owned reports whether pid is alive and still the component that Up
// started: same executable name, and a command line that names the state
// directory (every component's does). A PID reused by another process
// after a crash is never ours.
func owned(pid int, binaryName, stateDir string) bool {
	if pid <= 1 || zombie(pid) {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if filepath.Base(exe) != binaryName {
		return false
	}
	return cmdlineMentions(pid, stateDir)
}

// cmdlineMentions reports whether an argument of pid's command line is dir
// or a path under it.
func cmdlineMentions(pid int, dir string) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range bytes.Split(raw, []byte{0}) {
		s := string(arg)
		if i := strings.IndexByte(s, '='); i >= 0 && strings.HasPrefix(s, "-") {
			s = s[i+1:]
		}
		s = strings.TrimPrefix(s, "unix://")
		if s == dir || strings.HasPrefix(s, dir+"/") {
			return true
		}
	}
	return false
}

// zombie reports whether pid has exited but is not reaped yet (or is gone).
func zombie(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name, which may hold spaces.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 || i+2 >= len(raw) {
		return true
	}
	return raw[i+2] == 'Z' || raw[i+2] == 'X'
}

// alive reports whether pid exists and has not exited.
func alive(pid int) bool {
	return pid > 1 && !zombie(pid)
}

// terminate stops pid: SIGTERM, then SIGKILL after grace. It returns once
// the process is gone or a zombie.
func terminate(ctx context.Context, pid int, grace time.Duration) error {
	if !alive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	if waitGone(ctx, pid, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	if waitGone(ctx, pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d still alive after SIGKILL", pid)
}

func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// pids lists every process on the machine.
func pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// parentPID returns pid's parent, 0 when unknown.
func parentPID(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// shims returns the containerd-shim-runc-v2 processes that serve the
// sandbox's containerd: their command line names its socket (-address).
func shims(l layout) []int {
	var out []int
	for _, pid := range pids() {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !strings.HasPrefix(filepath.Base(exe), "containerd-shim") {
			continue
		}
		if cmdlineMentions(pid, l.state) {
			out = append(out, pid)
		}
	}
	return out
}

// tail returns the last n lines of the file at path, for error messages.
func tail(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
