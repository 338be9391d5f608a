package oom

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrBPFFiltered is wrapped by the BPF source's error when bpf(2) is
// refused before the kernel looks at it although the process holds the
// capabilities: a seccomp profile (or an LSM) refuses the call, and the
// agent falls back to the next OOM source.
var ErrBPFFiltered = errors.New("bpf(2) is refused by the container's seccomp profile (or an LSM) although CAP_BPF and CAP_PERFMON are effective: " +
	"give the agent a profile that allows bpf(2) and perf_event_open(2) (a runtime whose RuntimeDefault allows them with CAP_BPF and CAP_PERFMON, " +
	"or a Localhost profile; Helm: agent.seccompProfile; docs/install.md)")

// procStatus holds the fields of /proc/self/status (proc(5)) that say why
// bpf(2) may be refused.
type procStatus struct {
	// capEff is the effective capability set.
	capEff uint64
	// seccomp is the seccomp mode: 0 off, 1 strict, 2 filter; -1 unknown.
	seccomp int
}

// parseProcStatus reads CapEff and Seccomp from a /proc/<pid>/status.
func parseProcStatus(status []byte) (procStatus, error) {
	st := procStatus{seccomp: -1}
	var capEff bool
	for line := range bytes.Lines(status) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		var err error
		switch string(key) {
		case "CapEff":
			st.capEff, err = strconv.ParseUint(string(value), 16, 64)
			capEff = err == nil
		case "Seccomp":
			st.seccomp, err = strconv.Atoi(string(value))
		}
		if err != nil {
			return st, fmt.Errorf("parse status %s %q: %w", key, value, err)
		}
	}
	if !capEff {
		return st, errors.New("parse status: no CapEff field")
	}
	return st, nil
}

// bpfCapable says whether caps hold what loading and attaching the OOM
// tracer needs: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN.
func (st procStatus) bpfCapable() bool {
	has := func(c int) bool { return st.capEff&(1<<c) != 0 }
	return has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF) && has(unix.CAP_PERFMON)
}

// probeBPF asks bpf(2) about file descriptor -1, which the kernel answers
// EBADF or EBADFD (by version). It returns EPERM or EACCES when something
// refused the call before the kernel looked at its argument (a seccomp
// filter, an LSM, or unprivileged BPF disabled for a process without
// CAP_BPF), and nil when the kernel answered.
func probeBPF() error {
	// union bpf_attr's info member: bpf_fd, info_len, info.
	attr := struct {
		fd, infoLen uint32
		info        uint64
	}{fd: ^uint32(0)}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno == unix.EPERM || errno == unix.EACCES {
		return errno
	}
	return nil
}

// explainRefusal wraps err, the OOM tracer's, with ErrBPFFiltered when the
// process holds the capabilities and a probe of bpf(2) is refused before
// the kernel looks at it; otherwise it returns err as it is (missing
// capabilities, an old kernel, no BTF: the tracer's error says so).
func explainRefusal(err error) error {
	status, rerr := os.ReadFile("/proc/self/status")
	if rerr != nil {
		return err
	}
	st, rerr := parseProcStatus(status)
	if rerr != nil || !st.bpfCapable() {
		return err
	}
	probe := probeBPF()
	if probe == nil {
		return err
	}
	return fmt.Errorf("%w (seccomp mode %d, probe: %w): %w", ErrBPFFiltered, st.seccomp, probe, err)
}

// initPIDNamespace is the inode of the initial pid namespace
// (PROC_PID_INIT_INO, include/linux/proc_ns.h).
const initPIDNamespace = 0xEFFFFFFC

// inHostPIDNamespace says whether the process runs in the host's pid
// namespace (a pod with hostPID), where /proc/<pid> of an OOM victim is
// the victim's.
func inHostPIDNamespace() bool {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return false
	}
	return st.Ino == initPIDNamespace
}
