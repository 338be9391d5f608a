package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestReadLimitsReadsTheContainersOwnCgroupOnV1AndV2(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  Limits
	}{
		{"v2", v2Tree(nil),
			Limits{Version: 2, MemoryBytes: 96 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUWeight: 2, MemoryOOMGroup: true}},
		{"v2 without limits, one process killed", v2Tree(map[string]string{"memory.max": "max\n", "cpu.max": "max 100000\n", "cpu.weight": "100\n", "memory.oom.group": "0\n"}),
			Limits{Version: 2, MemoryBytes: -1, CPUQuotaMicros: -1, CPUPeriodMicros: 100000, CPUWeight: 100}},
		{"v1", v1Tree(nil),
			Limits{Version: 1, MemoryBytes: 256 << 20, CPUQuotaMicros: 100000, CPUPeriodMicros: 100000, CPUShares: 51}},
		{"v1 without limits", v1Tree(map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n", "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.shares": "1024\n"}),
			Limits{Version: 1, MemoryBytes: 9223372036854771712, CPUQuotaMicros: -1, CPUPeriodMicros: 100000, CPUShares: 1024}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadLimits(cgroupTree(t, tt.files))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// A kernel before 4.19 has no memory.oom.group: it kills one process.
func TestReadLimitsWithoutMemoryOOMGroupIsOneProcessKilled(t *testing.T) {
	root := cgroupTree(t, v2Tree(nil))
	require.NoError(t, os.Remove(filepath.Join(root, "memory.oom.group")))
	got, err := ReadLimits(root)
	require.NoError(t, err)
	assert.False(t, got.MemoryOOMGroup)
	assert.EqualValues(t, 96<<20, got.MemoryBytes)
}

func TestReadLimitsNamesTheFileItCannotRead(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		missing   string // a file of the tree to remove
		file      string // the file the error names
		malformed bool   // the error matches ErrMalformed
	}{
		{"v2 memory.max missing", v2Tree(nil), "memory.max", "memory.max", false},
		{"v2 memory.max not a number", v2Tree(map[string]string{"memory.max": "lots\n"}), "", "memory.max", true},
		{"v2 cpu.max one field", v2Tree(map[string]string{"cpu.max": "max\n"}), "", "cpu.max", false},
		{"v2 cpu.max period max", v2Tree(map[string]string{"cpu.max": "50000 max\n"}), "", "cpu.max", false},
		{"v2 cpu.weight truncated", v2Tree(map[string]string{"cpu.weight": "10"}), "", "cpu.weight", true},
		{"v2 memory.oom.group not a number", v2Tree(map[string]string{"memory.oom.group": "yes\n"}), "", "memory.oom.group", true},
		{"v1 quota not a number", v1Tree(map[string]string{"cpu/cpu.cfs_quota_us": "none\n"}), "", "cpu.cfs_quota_us", false},
		{"v1 shares negative", v1Tree(map[string]string{"cpu/cpu.shares": "-2\n"}), "", "cpu.shares", true},
		{"v1 memory missing", v1Tree(nil), "memory/memory.limit_in_bytes", "memory.limit_in_bytes", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := cgroupTree(t, tt.files)
			if tt.missing != "" {
				require.NoError(t, os.Remove(filepath.Join(root, tt.missing)))
			}
			_, err := ReadLimits(root)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.file)
			assert.Equal(t, tt.malformed, errors.Is(err, ErrMalformed), "%v", err)
		})
	}
}
