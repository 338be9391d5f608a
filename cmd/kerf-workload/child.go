package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
)

// childEnv makes kerf-workload a child process: its value is the MiB to
// allocate, touch and hold. It is a variable, not a flag, so that the usage
// offers no child mode to run by hand.
const childEnv = "KERF_WORKLOAD_CHILD_MIB"

// childComm is the child's process name (comm). The kernel's OOM report
// and the OOM tracers then name it apart from its parent.
const childComm = "kerf-child"

// childHeld is the line the child writes to its parent once every MiB is
// touched.
const childHeld = "held"

// The states of a child in GET /stats.
const (
	childAllocating = "allocating"
	childHolding    = "holding"
	childExited     = "exited"
)

// errChildRunning is the error of starting a child while one runs: a
// workload runs one child at a time.
var errChildRunning = errors.New("a child process runs already")

// ChildStats is the workload's last child process, in GET /stats.
type ChildStats struct {
	PID int `json:"pid"`
	// MiB is what it was told to allocate.
	MiB int `json:"mib"`
	// State is allocating, holding (every MiB touched) or exited.
	State string `json:"state"`
	// Exit is how it ended, as Go's os.ProcessState says it: "signal:
	// killed" for the OOM killer's SIGKILL.
	Exit string `json:"exit,omitempty"`
}

// child is a running or ended child process and what the parent knows of
// it; the workload's mu guards stats.
type child struct {
	cmd   *exec.Cmd
	stats ChildStats
	done  chan struct{} // closed once the process is reaped
}

// StartChild starts a child process that allocates, touches and holds mib
// MiB while the workload answers. It refuses while a child runs.
func (w *workload) StartChild(mib int) (ChildStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.child; c != nil && c.stats.State != childExited {
		return c.stats, fmt.Errorf("%w (pid %d, %d MiB, %s): POST /free ends it", errChildRunning, c.stats.PID, c.stats.MiB, c.stats.State)
	}
	exe, err := os.Executable()
	if err != nil {
		return ChildStats{}, fmt.Errorf("find this program to start a child: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", childEnv, mib))
	cmd.Stderr = os.Stderr
	// The child must not outlive its parent, in a container or in a test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return ChildStats{}, fmt.Errorf("start a child: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return ChildStats{}, fmt.Errorf("start a child: %w", err)
	}
	c := &child{cmd: cmd, stats: ChildStats{PID: cmd.Process.Pid, MiB: mib, State: childAllocating}, done: make(chan struct{})}
	w.child = c
	w.log.Info("child started", "pid", c.stats.PID, "mib", mib)
	go func() {
		// Read until the child closes its end (it exits): Wait must
		// follow the reads.
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == childHeld {
				w.mu.Lock()
				c.stats.State = childHolding
				w.mu.Unlock()
			}
		}
		err := cmd.Wait()
		w.mu.Lock()
		c.stats.State = childExited
		c.stats.Exit = cmd.ProcessState.String()
		w.mu.Unlock()
		w.log.Info("child exited", "pid", c.stats.PID, "exit", c.stats.Exit, "err", err)
		close(c.done)
	}()
	return c.stats, nil
}

// stopChild kills the running child, if any, and waits until it is
// reaped.
func (w *workload) stopChild() {
	w.mu.Lock()
	c := w.child
	w.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// childStats is the last child's state, nil before the first.
func (w *workload) childStats() *ChildStats {
	if w.child == nil {
		return nil
	}
	s := w.child.stats
	return &s
}

// runChild is the whole life of a child process: it allocates and touches
// the MiB its parent asked for, says so, and holds them until SIGTERM or
// SIGINT (or its parent's death). It returns the exit code.
func runChild(log *slog.Logger, value string) int {
	mib, err := strconv.Atoi(value)
	if err != nil || mib < 0 {
		log.Error("kerf-workload child cannot start", "err", fmt.Sprintf("%s=%q: must be an integer ≥ 0", childEnv, value))
		return 2
	}
	// Best effort both: the name is for the kernel's report, and an
	// oom_score_adj of 1000 makes the child the OOM killer's first choice
	// in its cgroup (proc(5); raising it needs no privilege).
	if err := os.WriteFile("/proc/self/comm", []byte(childComm), 0); err != nil {
		log.Warn("kerf-workload child keeps its name", "err", err)
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		log.Warn("kerf-workload child keeps its oom_score_adj", "err", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	chunks := make([][]byte, 0, mib)
	for range mib {
		chunks = append(chunks, touchedMiB())
	}
	if _, err := fmt.Println(childHeld); err != nil {
		log.Error("kerf-workload child cannot tell its parent", "err", err)
		return 1
	}
	<-stop
	runtime.KeepAlive(chunks)
	return 0
}
