package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

// kubepodsTree is a kernel tree whose parent stands for a kubelet's
// --cgroup-root (root, as a cgroup path) and holds the pods' cgroup as the
// cgroupfs driver names it (kubepods, its directory).
func kubepodsTree(t *testing.T) (k *kernelTree, root, kubepods string) {
	t.Helper()
	k = newKernelTree(t)
	root, err := k.m.Rel(k.parent)
	require.NoError(t, err)
	kubepods = filepath.Join(k.parent, "kubepods")
	require.NoError(t, os.Mkdir(kubepods, 0o755))
	t.Cleanup(func() { _ = os.Remove(kubepods) })
	return k, root, kubepods
}

// TestKernelLayoutCheckNamesThePathAndTheDriver makes a kubelet's pods
// cgroup as the cgroupfs driver names it (<root>/kubepods) under a root of
// its own in the real cpu hierarchy. The agent's layout with that driver
// finds it; with the systemd driver it does not, and says where it looked
// and which driver would find the pods. Before, an agent told the wrong
// driver sampled nothing and said nothing.
func TestKernelLayoutCheckNamesThePathAndTheDriver(t *testing.T) {
	k, root, kubepods := kubepodsTree(t)
	assert.NoError(t, CheckLayout(k.h, cgroup.Layout{Driver: cgroup.DriverCgroupfs, Root: root}))
	err := CheckLayout(k.h, cgroup.Layout{Driver: cgroup.DriverSystemd, Root: root})
	require.Error(t, err)
	slice, _ := cgroup.Layout{Driver: cgroup.DriverSystemd, Root: root}.KubepodsDir()
	wantDir, _ := k.h.Path("cpu", slice)
	assert.Contains(t, err.Error(), "no cgroup of the kubelet's pods at "+wantDir+" (--cgroup-driver=systemd, --kubelet-cgroup-root="+root+")")
	assert.Contains(t, err.Error(), "the kubelet's pods are at "+kubepods+", set --cgroup-driver=cgroupfs")

	require.NoError(t, os.Remove(kubepods))
	err = CheckLayout(k.h, cgroup.Layout{Driver: cgroup.DriverCgroupfs, Root: root})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "set --cgroup-driver", "no driver finds the pods: no hint")
	t.Log(err)
}

// TestKernelAnAgentOfTheWrongDriverSaysSo runs the agent's layout checks
// on a real cgroup tree whose pods' cgroup is named as the cgroupfs driver
// names it, with the systemd driver: kerf_agent_layout_problem marks
// kubepods_not_found, and containers_not_found for a pass that found none
// of its containers, and the log names the paths. Told the right driver,
// a minute later, with a container read, both go back to 0.
func TestKernelAnAgentOfTheWrongDriverSaysSo(t *testing.T) {
	k, root, _ := kubepodsTree(t)
	var logs bytes.Buffer
	a := &Agent{log: slog.New(slog.NewTextHandler(&logs, nil)), hierarchy: k.h,
		layout: cgroup.Layout{Driver: cgroup.DriverSystemd, Root: root}, layoutProblem: newLayoutProblemGauge()}
	problem := func(reason string) float64 { return testutil.ToFloat64(a.layoutProblem.WithLabelValues(reason)) }

	now := time.Now()
	a.checkLayout(now, Pass{NotFound: 2, NotFoundPath: root + ".slice/x"})
	assert.Equal(t, 1.0, problem(ProblemKubepodsNotFound))
	assert.Equal(t, 1.0, problem(ProblemContainersNotFound))
	assert.Equal(t, 0.0, problem(ProblemNoCgroups))
	assert.Contains(t, logs.String(), "set --cgroup-driver=cgroupfs")
	assert.Contains(t, logs.String(), "path="+root+".slice/x")
	assert.False(t, a.Ready(), "not ready: /readyz says so to the kubelet")

	a.layout.Driver = cgroup.DriverCgroupfs
	a.checkLayout(now.Add(layoutCheckInterval), Pass{Read: 1})
	assert.Equal(t, 0.0, problem(ProblemKubepodsNotFound))
	assert.Equal(t, 0.0, problem(ProblemContainersNotFound))
	assert.True(t, a.Ready())
}
