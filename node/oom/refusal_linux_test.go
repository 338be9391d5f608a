package oom

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/cgroup"
)

// seccompChildEnv makes the test binary a process that refuses itself
// bpf(2) with a seccomp filter, as a runtime's profile would, opens the
// OOM sources under the cgroup root the variable names and prints what
// it got.
const seccompChildEnv = "KERF_OOM_TEST_SECCOMP_ROOT"

// openUnderSeccomp is the seccomp child: it prints the BPF source's error,
// then the source auto chose and why it skipped the better ones.
func openUnderSeccomp(root string) {
	if err := refuseBPF(); err != nil {
		fmt.Printf("seccomp filter: %v\n", err)
		os.Exit(2)
	}
	_, _, err := Open(KindBPF, Options{Root: root})
	fmt.Printf("bpf: filtered=%t: %v\n", errors.Is(err, ErrBPFFiltered), err)
	src, skipped, err := Open(KindAuto, Options{Root: root})
	if err != nil {
		fmt.Printf("auto: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("auto: %s\n", src.Name())
	for _, e := range skipped {
		fmt.Printf("skipped: filtered=%t: %v\n", errors.Is(e, ErrBPFFiltered), e)
	}
	_ = src.Close()
	os.Exit(0)
}

// refuseBPF installs, on every thread, a seccomp filter that fails bpf(2)
// with EPERM and allows every other call: what a runtime's default
// profile without CAP_BPF's rule does (containerd's before it learnt
// CAP_BPF).
func refuseBPF() error {
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_BPF},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// TestBPFRefusedBySeccompSaysSoAndFallsBackToTheCgroupFiles runs the
// sources in a process whose seccomp filter refuses bpf(2) while it holds
// every capability: the BPF source's error names the profile as the
// cause (not missing capabilities) and auto takes the cgroup files.
func TestBPFRefusedBySeccompSaysSoAndFallsBackToTheCgroupFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to create cgroups and load BPF: running as uid %d", os.Geteuid())
	}
	h, err := cgroup.Detect()
	require.NoError(t, err)
	root, _, _ := memoryCgroup(t, h)
	src, _, err := Open(KindBPF, Options{Hierarchy: h, Root: root})
	if err != nil {
		t.Skipf("the BPF source cannot run here without a filter either: %v", err)
	}
	require.NoError(t, src.Close())
	require.Nil(t, probeBPF(), "without a filter the kernel answers the probe")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), seccompChildEnv+"="+root)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 3, "%s", out)
	assert.True(t, strings.HasPrefix(lines[0], "bpf: filtered=true: "), lines[0])
	assert.Contains(t, lines[0], "seccomp mode 2")
	assert.Contains(t, lines[0], "agent.seccompProfile")
	assert.Equal(t, "auto: cgroup", lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "skipped: filtered=true: bpf: "), lines[2])
}
