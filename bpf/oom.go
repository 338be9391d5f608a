package bpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf/btf"
)

// Hook names the kernel attachment point an OOMTracer uses.
type Hook string

const (
	// HookBTF is the BTF-typed raw tracepoint on oom/mark_victim, the
	// preferred hook: it reads the victim task itself.
	HookBTF Hook = "tp_btf/mark_victim"
	// HookTracepoint is the classic oom/mark_victim tracepoint, used when the
	// kernel refuses BTF tracing programs. It needs tracefs mounted.
	HookTracepoint Hook = "tracepoint/oom/mark_victim"
)

// Hooks returns the hooks in the order NewOOMTracer tries them.
func Hooks() []Hook {
	return []Hook{HookBTF, HookTracepoint}
}

// ErrPermission is wrapped by NewOOMTracer's error when the process lacks the
// privileges to load and attach BPF tracing programs.
var ErrPermission = errors.New("the OOM tracer needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, which kernels before 5.8 require)")

// ErrNotSupported is wrapped by NewOOMTracer's error on platforms the BPF
// object is not built for (it is built for little-endian Linux).
var ErrNotSupported = errors.New("the OOM tracer is only built for little-endian Linux")

// Resolution says where an OOMEvent's TGID, Comm and cgroup ids came from.
type Resolution uint8

const (
	// ResolvedInKernel means the BPF program read them from the victim task.
	ResolvedInKernel Resolution = iota
	// ResolvedFromProc means the BPF program could not reach the victim task
	// (classic tracepoint, OOM killer running in another process) and the
	// loader read /proc/<pid> after the event. It is best-effort: the victim
	// may have been reaped, and its pid reused, in between.
	ResolvedFromProc
	// Unresolved means neither worked; the fields the kernel did not fill are
	// zero. The cgroup files (memory.events, memory.oom_control) still count
	// the kill.
	Unresolved
)

// String returns the resolution's name.
func (r Resolution) String() string {
	switch r {
	case ResolvedInKernel:
		return "kernel"
	case ResolvedFromProc:
		return "proc"
	case Unresolved:
		return "unresolved"
	}
	return fmt.Sprintf("Resolution(%d)", uint8(r))
}

// OOMEvent is one OOM-killer victim, as reported by the oom/mark_victim hook.
type OOMEvent struct {
	// KtimeNS is the kernel's CLOCK_MONOTONIC time at the hook, in
	// nanoseconds (bpf_ktime_get_ns). Compare it with MonotonicNow, or turn
	// it into a time.Time with Time.
	KtimeNS uint64
	// PID is the victim's task id as the tracepoint reports it (the thread
	// the kernel chose; for a process, normally its main thread).
	PID uint32
	// TGID is the victim's process id (thread-group id), as seen from the
	// initial pid namespace.
	TGID uint32
	// TriggerTGID is the process id of the task that ran the OOM killer:
	// the allocating task, often but not always the victim.
	TriggerTGID uint32
	// Comm is the victim's command name (at most 15 bytes).
	Comm string
	// CgroupID is the victim's cgroup id in the default (v2) hierarchy: the
	// inode number of its cgroup directory under the cgroup2 mount.
	CgroupID uint64
	// MemcgID is the id of the cgroup that holds the victim's memory
	// controller state: on cgroup v1 the inode of its directory under the
	// memory mount; on cgroup v2 the nearest ancestor of CgroupID (or
	// CgroupID itself) with the memory controller enabled.
	MemcgID uint64
	// Resolution says where TGID, Comm and the cgroup ids came from.
	Resolution Resolution
}

// Time returns the wall-clock time of the event. The result carries a Go
// monotonic reading, so it can be compared with time.Now() and subtracted
// from it safely.
func (e *OOMEvent) Time() time.Time {
	return MonotonicToTime(e.KtimeNS)
}

// MonotonicToTime converts a CLOCK_MONOTONIC reading in nanoseconds (such as
// a BPF program's bpf_ktime_get_ns) into a time.Time, by its distance from
// the current reading of both clocks.
func MonotonicToTime(ns uint64) time.Time {
	now := time.Now()
	return now.Add(-time.Duration(int64(MonotonicNow()) - int64(ns)))
}

// OOMTracerOptions configures NewOOMTracer. The zero value is the production
// setting.
type OOMTracerOptions struct {
	// Hook, when set, forces that hook instead of trying Hooks in order.
	Hook Hook
	// ProcRoot is the procfs mount used to resolve victims the BPF program
	// could not read; the default is /proc. Only one that shows the host's
	// pid namespace resolves them (an agent run with hostPID, which the
	// manifests no longer ask for: docs/install.md).
	ProcRoot string
	// KernelTypes, when set, replaces /sys/kernel/btf/vmlinux for CO-RE
	// relocations, for kernels that ship no BTF (e.g. a BTFHub file).
	KernelTypes *btf.Spec
}
