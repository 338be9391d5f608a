package cgroup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	mountV1 = Mount{Version: 1}
	mountV2 = Mount{Version: 2}
)

// writeUsageFiles writes the files UsageReader opens for version (1 or 2)
// into dir, with peak or without.
func writeUsageFiles(t testing.TB, dir string, version int, peak bool) {
	if version == 2 {
		writeFile(t, filepath.Join(dir, "cpu.stat"), cpuStatV2)
		writeFile(t, filepath.Join(dir, "memory.current"), "1073741824\n")
		writeFile(t, filepath.Join(dir, "memory.stat"), memoryStatV2)
		if peak {
			writeFile(t, filepath.Join(dir, "memory.peak"), "1207959552\n")
		}
		return
	}
	writeFile(t, filepath.Join(dir, "cpuacct.usage"), "31415926535\n")
	writeFile(t, filepath.Join(dir, "memory.usage_in_bytes"), "3000000000\n")
	writeFile(t, filepath.Join(dir, "memory.stat"), memoryStatV1)
	if peak {
		writeFile(t, filepath.Join(dir, "memory.max_usage_in_bytes"), "4000000000\n")
	}
}

func TestUsageReaderReadsEachVersionsFiles(t *testing.T) {
	tests := []struct {
		name    string
		version int
		peak    bool
		want    Usage
	}{
		{"v1", 1, true, Usage{CPU: 31415926535, Memory: 3000000000, WorkingSet: 3000000000 - 2066391040, Peak: 4000000000, PeakAvailable: true}},
		{"v2", 2, true, Usage{CPU: 5316541 * time.Microsecond, Memory: 1 << 30, WorkingSet: 1<<30 - 104857600, Peak: 1207959552, PeakAvailable: true}},
		{"v2 before Linux 5.19: no memory.peak", 2, false, Usage{CPU: 5316541 * time.Microsecond, Memory: 1 << 30, WorkingSet: 1<<30 - 104857600}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeUsageFiles(t, dir, tt.version, tt.peak)
			m := Mount{Version: tt.version}
			r, err := OpenUsageAt(m, dir, m, dir)
			require.NoError(t, err)
			defer r.Close()
			var u Usage
			require.NoError(t, r.Read(&u))
			assert.Equal(t, tt.want, u)
			assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Read(&u) }))
		})
	}
}

func TestUsageReaderReadsCPUAndMemoryFromTheirOwnTrees(t *testing.T) {
	cpuDir, memDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(cpuDir, "cpuacct.usage"), "5\n")
	writeUsageFiles(t, memDir, 2, true)
	r, err := OpenUsageAt(mountV1, cpuDir, mountV2, memDir)
	require.NoError(t, err)
	defer r.Close()
	var u Usage
	require.NoError(t, r.Read(&u))
	assert.Equal(t, time.Duration(5), u.CPU)
	assert.Equal(t, uint64(1<<30), u.Memory)
}

func TestUsageReaderSeesNewContentOnEachRead(t *testing.T) {
	dir := t.TempDir()
	writeUsageFiles(t, dir, 1, true)
	r, err := OpenUsageAt(mountV1, dir, mountV1, dir)
	require.NoError(t, err)
	defer r.Close()
	var u Usage
	require.NoError(t, r.Read(&u))

	writeFile(t, filepath.Join(dir, "cpuacct.usage"), "31515926535\n")
	writeFile(t, filepath.Join(dir, "memory.usage_in_bytes"), "1000\n")
	writeFile(t, filepath.Join(dir, "memory.stat"), "total_inactive_file 200\n")
	require.NoError(t, r.Read(&u))
	assert.Equal(t, Usage{CPU: 31515926535, Memory: 1000, WorkingSet: 800, Peak: 4000000000, PeakAvailable: true}, u)
}

func TestUsageReaderReportsAMissingCgroupAsGone(t *testing.T) {
	for _, m := range []Mount{mountV1, mountV2} {
		dir := filepath.Join(t.TempDir(), "removed")
		_, err := OpenUsageAt(m, dir, m, dir)
		assert.ErrorIs(t, err, ErrGone)
		assert.ErrorIs(t, err, os.ErrNotExist)
		assert.NotErrorIs(t, err, ErrMalformed)
	}

	// A v1 cgroup must have its peak file: only v2 kernels lack one.
	dir := t.TempDir()
	writeUsageFiles(t, dir, 1, false)
	_, err := OpenUsageAt(mountV1, dir, mountV1, dir)
	assert.ErrorIs(t, err, ErrGone)
	assert.Contains(t, err.Error(), "memory.max_usage_in_bytes")

	dir = t.TempDir()
	writeUsageFiles(t, dir, 2, true)
	require.NoError(t, os.Remove(filepath.Join(dir, "memory.stat")))
	_, err = OpenUsageAt(mountV2, dir, mountV2, dir)
	assert.ErrorIs(t, err, ErrGone)
	assert.Contains(t, err.Error(), filepath.Join(dir, "memory.stat"))

	h, _ := detectFixture(t, "legacy-cgroupfs-containerd")
	_, err = h.OpenUsage("/kubepods/pod" + uidE + "/" + fixtureJob)
	assert.ErrorIs(t, err, ErrGone)
	assert.Contains(t, err.Error(), "cpuacct.usage")
}

func TestUsageReaderErrorsNameTheFile(t *testing.T) {
	tests := []struct {
		name, file, content string
		version             int
		wantInErr           string
	}{
		{"v1 cpuacct.usage", "cpuacct.usage", "12 34\n", 1, `value "12 34": not a decimal integer`},
		{"v1 usage", "memory.usage_in_bytes", "1", 1, "truncated"},
		{"v1 memory.stat of v2", "memory.stat", memoryStatV2, 1, "missing key total_inactive_file"},
		{"v1 peak", "memory.max_usage_in_bytes", "18446744073709551616\n", 1, "overflows uint64"},
		{"v2 cpu.stat", "cpu.stat", "user_usec 1\n", 2, "missing key usage_usec"},
		{"v2 memory.current", "memory.current", "max\n", 2, "not a decimal integer"},
		{"v2 memory.stat", "memory.stat", "inactive_file 1\ninactive_file 1\n", 2, `line 2: inactive_file "1": repeated key`},
		{"v2 memory.peak", "memory.peak", "\n", 2, "empty value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeUsageFiles(t, dir, tt.version, true)
			m := Mount{Version: tt.version}
			r, err := OpenUsageAt(m, dir, m, dir)
			require.NoError(t, err)
			defer r.Close()
			u := Usage{CPU: 42}
			writeFile(t, filepath.Join(dir, tt.file), tt.content)
			err = r.Read(&u)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.NotErrorIs(t, err, ErrGone)
			assert.Contains(t, err.Error(), "parse "+filepath.Join(dir, tt.file)+": ")
			assert.Contains(t, err.Error(), tt.wantInErr)
			assert.Equal(t, Usage{CPU: 42}, u, "a failed read leaves the destination alone")
		})
	}
}

func TestUsageReaderFailsAfterClose(t *testing.T) {
	for _, peak := range []bool{true, false} {
		dir := t.TempDir()
		writeUsageFiles(t, dir, 2, peak)
		r, err := OpenUsageAt(mountV2, dir, mountV2, dir)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		assert.ErrorIs(t, r.Read(new(Usage)), os.ErrClosed)
		err = r.Close()
		assert.ErrorIs(t, err, os.ErrClosed)
	}
}

func TestOpenUsageNeedsTheControllers(t *testing.T) {
	h := &Hierarchy{Mode: ModeLegacy, Mounts: []Mount{{Path: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Version: 1, Controllers: []string{"cpu", "cpuacct"}}}}
	_, err := h.OpenUsage("/kubepods")
	assert.ErrorContains(t, err, `"memory" is not mounted`)
	h = &Hierarchy{Mode: ModeLegacy, Mounts: []Mount{{Path: "/sys/fs/cgroup/memory", Root: "/", Version: 1, Controllers: []string{"memory"}}}}
	_, err = h.OpenUsage("/kubepods")
	assert.ErrorContains(t, err, `"cpuacct" is not mounted`)
}

func TestUsageReadersShareOneStatBuffer(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	writeUsageFiles(t, v1, 1, true)
	writeUsageFiles(t, v2, 2, true)
	var want1, want2 Usage
	for _, c := range []struct {
		dir string
		m   Mount
		u   *Usage
	}{{v1, mountV1, &want1}, {v2, mountV2, &want2}} {
		r, err := OpenUsageAt(c.m, c.dir, c.m, c.dir)
		require.NoError(t, err)
		require.NoError(t, r.Read(c.u))
		require.NoError(t, r.Close())
	}

	var shared []byte
	r1, err := OpenUsageAt(mountV1, v1, mountV1, v1)
	require.NoError(t, err)
	defer r1.Close()
	r2, err := OpenUsageAt(mountV2, v2, mountV2, v2)
	require.NoError(t, err)
	defer r2.Close()
	r1.ShareStatBuffer(&shared)
	r2.ShareStatBuffer(&shared)
	for range 2 {
		var u1, u2 Usage
		require.NoError(t, r1.Read(&u1))
		require.NoError(t, r2.Read(&u2))
		assert.Equal(t, want1, u1)
		assert.Equal(t, want2, u2)
	}
	assert.Len(t, shared, sharedFileSize, "one buffer, made at the first read")
	assert.Nil(t, r1.stat.buf, "no buffer of its own")

	// A memory.stat larger than the buffer grows the shared one.
	big := memoryStatV1
	for len(big) <= sharedFileSize {
		big += "x_padding 1\n"
	}
	writeFile(t, filepath.Join(v1, "memory.stat"), big)
	var u Usage
	require.NoError(t, r1.Read(&u))
	assert.Equal(t, want1.WorkingSet, u.WorkingSet)
	assert.Greater(t, len(shared), sharedFileSize)
	require.NoError(t, r2.Read(&u))
	assert.Equal(t, want2, u)
}
