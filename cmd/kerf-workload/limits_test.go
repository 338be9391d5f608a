package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

// cgroupTree writes files (path relative to the root → content) under a
// new directory, as a container sees its /sys/fs/cgroup.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

// v2Tree is a container's cgroup in its own cgroup namespace on v2: 96Mi,
// 500m, the weight of a 50m request, OOM-killed as a group (the kubelet's
// default).
func v2Tree(over map[string]string) map[string]string {
	files := map[string]string{
		"cgroup.controllers": "cpuset cpu io memory hugetlb pids\n",
		"memory.max":         "100663296\n",
		"cpu.max":            "50000 100000\n",
		"cpu.weight":         "2\n",
		"memory.oom.group":   "1\n",
	}
	for k, v := range over {
		files[k] = v
	}
	return files
}

// v1Tree is a container's cgroup as runc mounts it on v1: 256Mi, 1 core,
// the shares of a 50m request.
func v1Tree(over map[string]string) map[string]string {
	files := map[string]string{
		"memory/memory.limit_in_bytes": "268435456\n",
		"cpu/cpu.cfs_quota_us":         "100000\n",
		"cpu/cpu.cfs_period_us":        "100000\n",
		"cpu/cpu.shares":               "51\n",
	}
	for k, v := range over {
		files[k] = v
	}
	return files
}

func TestLimitsEndpointServesTheCgroupUnderCgroupRoot(t *testing.T) {
	p := start(t, "--cgroup-root", cgroupTree(t, v2Tree(nil)))
	resp, err := http.Get(p.url + "/limits")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got cgroup.Limits
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, cgroup.Limits{Version: 2, MemoryBytes: 96 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUWeight: 2, MemoryOOMGroup: true}, got)
}

func TestLimitsEndpointAnswers500NamingTheFile(t *testing.T) {
	root := cgroupTree(t, v1Tree(nil))
	require.NoError(t, os.Remove(filepath.Join(root, "cpu", "cpu.shares")))
	p := start(t, "--cgroup-root", root)
	resp, err := http.Get(p.url + "/limits")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	require.NoError(t, err)
	assert.Contains(t, string(body), "cpu.shares")
}
