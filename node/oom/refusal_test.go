package oom

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

func TestProcStatusSaysWhetherTheOOMTracerHasItsCapabilities(t *testing.T) {
	for _, c := range []struct {
		name, status string
		capable      bool
		seccomp      int
	}{
		// The agent's pod: BPF, PERFMON (and SYSLOG, as it once had), RuntimeDefault.
		{"BPF and PERFMON", "Name:\tkerf-agent\nCapEff:\t000000c400000000\nNoNewPrivs:\t1\nSeccomp:\t2\n", true, 2},
		{"SYS_ADMIN", "CapEff:\t0000000000200000\nSeccomp:\t0\n", true, 0},
		{"BPF alone", "CapEff:\t0000008000000000\nSeccomp:\t2\n", false, 2},
		{"none", "CapEff:\t0000000000000000\nSeccomp:\t2\n", false, 2},
		{"no Seccomp line (a kernel without seccomp)", "CapEff:\t000001ffffffffff\n", true, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := parseProcStatus([]byte(c.status))
			require.NoError(t, err)
			assert.Equal(t, c.capable, st.bpfCapable())
			assert.Equal(t, c.seccomp, st.seccomp)
		})
	}
	_, err := parseProcStatus([]byte("Name:\tx\n"))
	assert.ErrorContains(t, err, "no CapEff")
	_, err = parseProcStatus([]byte("CapEff:\tzz\n"))
	assert.ErrorContains(t, err, "CapEff")
}

// TestAKillReadFromAnotherPIDNamespacesProcKeepsItsPIDAlone: without
// hostPID, the tracer's /proc reading of a victim the BPF program could
// not read describes a process of the agent's own pid namespace (or
// none), so the kill is not given that process's cgroup; read in the
// kernel, or from the host's /proc, it is.
func TestAKillReadFromAnotherPIDNamespacesProcKeepsItsPIDAlone(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kubepods", "burstable", "pod"+testPodUID, testContainerID)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ids, err := cgroup.NewIDIndex(root)
	require.NoError(t, err)
	id, err := cgroup.CgroupID(dir)
	require.NoError(t, err)
	resolved := Kill{Source: KindBPF, PID: 4240, Comm: "app", Count: 1, CgroupID: id,
		Cgroup: "/kubepods/burstable/pod" + testPodUID + "/" + testContainerID, PodUID: testPodUID, ContainerID: testContainerID}
	pidOnly := Kill{Source: KindBPF, PID: 4242, Count: 1}
	for _, c := range []struct {
		name       string
		resolution bpf.Resolution
		hostPIDs   bool
		want       Kill
	}{
		{"read in the kernel", bpf.ResolvedInKernel, false, resolved},
		{"read from the host's /proc", bpf.ResolvedFromProc, true, resolved},
		{"read from another pid namespace's /proc", bpf.ResolvedFromProc, false, pidOnly},
		{"unresolved in another pid namespace", bpf.Unresolved, false, pidOnly},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &bpfSource{memory: cgroup.Mount{Path: root, Root: "/", Version: 2}, ids: ids, unified: true, hostPIDs: c.hostPIDs}
			ev := bpf.OOMEvent{KtimeNS: 1, PID: 4242, TGID: 4240, Comm: "app", CgroupID: id, MemcgID: id, Resolution: c.resolution}
			got := s.kill(&ev)
			assert.False(t, got.Time.IsZero())
			got.Time, got.KernelNS = c.want.Time, c.want.KernelNS
			assert.Equal(t, c.want, got)
		})
	}
}
