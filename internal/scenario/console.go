package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// ConsoleKills follows the sandbox VM node's console (QEMU's serial port,
// logs/vm.log in the state directory) and keeps when each OOM kill the
// guest kernel printed there reached the host: the clock start of a kill
// in the VM, whose kernel no tracer on the host sees. The kernel prints
// the line at error level, which the console shows even with "quiet",
// while it kills; the serial port adds well under a millisecond.
type ConsoleKills struct {
	f      *os.File
	mu     sync.Mutex
	kills  []ConsoleKill
	notify chan struct{}
	done   chan struct{}
	ended  chan struct{}
}

// ConsoleKill is one "Memory cgroup out of memory: Killed process PID
// (COMM)" line and when this process read it.
type ConsoleKill struct {
	PID  int
	Comm string
	Seen time.Time
}

// The names (comm) the kernel gives kerf-workload's processes in its kill
// lines: the program, and the child of POST /alloc?child=1.
const (
	workloadComm = "kerf-workload"
	childComm    = "kerf-child"
)

// maxConsoleKills bounds what a ConsoleKills keeps: the oldest go first.
const maxConsoleKills = 1024

var consoleKillLine = regexp.MustCompile(`Memory cgroup out of memory: Killed process (\d+) \(([^)]*)\)`)

// NewConsoleKills follows the console log at path from its current end.
func NewConsoleKills(path string) (*ConsoleKills, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the VM node's console: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		_ = f.Close()
		return nil, err
	}
	k := &ConsoleKills{f: f, notify: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{})}
	go k.follow()
	return k, nil
}

// follow reads what the console appends, every millisecond.
func (k *ConsoleKills) follow() {
	defer close(k.ended)
	buf := make([]byte, 64<<10)
	var line []byte
	for {
		n, _ := k.f.Read(buf)
		at := time.Now()
		for _, c := range buf[:n] {
			if c != '\n' {
				if len(line) < 4096 {
					line = append(line, c)
				}
				continue
			}
			k.record(line, at)
			line = line[:0]
		}
		if n > 0 {
			continue
		}
		select {
		case <-k.done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

func (k *ConsoleKills) record(line []byte, at time.Time) {
	if !bytes.Contains(line, []byte("Killed process")) {
		return
	}
	m := consoleKillLine.FindSubmatch(line)
	if m == nil {
		return
	}
	pid, _ := strconv.Atoi(string(m[1]))
	k.mu.Lock()
	if len(k.kills) == maxConsoleKills {
		k.kills = k.kills[1:]
	}
	k.kills = append(k.kills, ConsoleKill{PID: pid, Comm: string(m[2]), Seen: at})
	k.mu.Unlock()
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

// VMConsole follows the console of the sandbox's VM node, for Env.Console.
func (in *Installed) VMConsole() (*ConsoleKills, error) {
	if in.Cluster.VMNode == "" {
		return nil, fmt.Errorf("the sandbox at %s has no VM node", in.Cluster.StateDir)
	}
	return NewConsoleKills(filepath.Join(in.Cluster.StateDir, "logs", "vm.log"))
}

// Wait returns the first kill of a process named comm that the console
// showed after since.
func (k *ConsoleKills) Wait(ctx context.Context, since time.Time, comm string) (ConsoleKill, error) {
	for {
		k.mu.Lock()
		for _, kill := range k.kills {
			if kill.Comm == comm && kill.Seen.After(since) {
				k.mu.Unlock()
				return kill, nil
			}
		}
		k.mu.Unlock()
		select {
		case <-k.notify:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ConsoleKill{}, fmt.Errorf("no OOM kill of %s on the VM node's console since %s: %w", comm, since.Format("15:04:05.000"), ctx.Err())
		}
	}
}

// Close stops following the console.
func (k *ConsoleKills) Close() error {
	close(k.done)
	<-k.ended
	return k.f.Close()
}
