package sandbox

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitRuleKeepsQuotedComments(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{`-A INPUT -j KUBE-FIREWALL`, []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
			[]string{"-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{`-A X -m comment --comment "say \"hi\"" -j CNI-1`, []string{"-A", "X", "-m", "comment", "--comment", `say "hi"`, "-j", "CNI-1"}},
		{`-A X --comment "" -j Y`, []string{"-A", "X", "--comment", "", "-j", "Y"}},
		{``, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, splitRule(tt.line), tt.line)
	}
}

func TestUnescapeMountinfoDecodesOctal(t *testing.T) {
	assert.Equal(t, "/var/tmp/a b", unescapeMountinfo(`/var/tmp/a\040b`))
	assert.Equal(t, "/plain", unescapeMountinfo("/plain"))
	assert.Equal(t, `/odd\0`, unescapeMountinfo(`/odd\0`))
}

func TestCmdlineMatchesOnlyPathsUnderTheStateDir(t *testing.T) {
	// The test binary's own command line never names /nonexistent.
	assert.False(t, cmdlineMentions(1, "/nonexistent-kerf-state"))
}

// TestRemoveCgroupTreesKillsWhatIsLeft: a process left in the kubelet's
// cgroups (its containerd shim killed from outside) is killed and the
// tree removed. Before, the tree stayed and each of its cgroups waited a
// second: minutes at a demo's 250 cgroups.
func TestRemoveCgroupTreesKillsWhatIsLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	base := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup v1 memory controller at %s: %v", base, err)
	}
	root := filepath.Join(base, fmt.Sprintf("kerf-test-kubepods-%d", os.Getpid()))
	leaf := filepath.Join(root, "burstable", "pod-a", "container-a")
	require.NoError(t, os.MkdirAll(leaf, 0o755))
	t.Cleanup(func() { _ = removeCgroupTrees(slog.New(slog.DiscardHandler), []string{root}) })
	cmd := exec.Command("sleep", "600")
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	require.NoError(t, os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))

	require.NoError(t, removeCgroupTrees(slog.New(slog.DiscardHandler), []string{root}))
	_, err := os.Stat(root)
	assert.True(t, os.IsNotExist(err), "the tree is removed: %v", err)
	select {
	case err := <-exited:
		assert.Error(t, err, "the process was killed")
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the tree is still running")
	}
}
