package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An agent in a container with its own cgroup namespace (containerd's
// default on cgroup v2) that mounts the host's /sys/fs/cgroup sees the
// mount's root relative to its namespace: seen on the vmnode guest
// (docs/vmnode.md), where the agent failed with "cgroup path /kubepods is
// outside the mount at /sys/fs/cgroup (its root is /../../../..)".
func TestDetectResolvesTheHierarchyRootSeenFromACgroupNamespace(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644))
	mi := "138 131 0:22 /../../../.. / ro,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	writeFile(t, filepath.Join(dir, "mountinfo"), mi)
	h, err := Detect(WithMountinfo(filepath.Join(dir, "mountinfo")), WithHostRoot(dir))
	require.NoError(t, err)
	m, ok := h.Unified()
	require.True(t, ok)
	assert.Equal(t, "/", m.Root)
	p, err := m.Join("/kubepods/burstable")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "kubepods/burstable"), p)
}

// A mount above the namespace that is not the hierarchy's root (it has
// cgroup.events) keeps its relative root: its absolute path is unknown.
func TestDetectKeepsTheRelativeRootOfASubtreeAboveTheNamespace(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.events"), []byte("populated 1\n"), 0o644))
	mi := "138 131 0:22 /../../.. / ro,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	writeFile(t, filepath.Join(dir, "mountinfo"), mi)
	h, err := Detect(WithMountinfo(filepath.Join(dir, "mountinfo")), WithHostRoot(dir))
	require.NoError(t, err)
	m, _ := h.Unified()
	assert.Equal(t, "/../../..", m.Root)
	_, err = m.Join("/kubepods")
	assert.Error(t, err)
}
