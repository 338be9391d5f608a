//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

func TestParseProcCgroupFindsV2AndMemoryLines(t *testing.T) {
	tests := []struct {
		name, data, v2, memory string
	}{
		{"hybrid", "9:name=systemd:/\n4:memory:/kubepods/burstable/pod1/c1\n1:cpu,cpuacct:/kubepods\n0::/kerf\n", "/kerf", "/kubepods/burstable/pod1/c1"},
		{"v2 only", "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope\n", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope", ""},
		{"v1 only, memory joined with another controller", "5:hugetlb,memory:/docker/c1\n", "", "/docker/c1"},
		{"zombie whose v2 cgroup was removed", "0::/kerf/c1 (deleted)\n", "/kerf/c1", ""},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v2, memory := parseProcCgroup([]byte(tt.data))
			assert.Equal(t, tt.v2, v2)
			assert.Equal(t, tt.memory, memory)
		})
	}
}

func TestParseStatusTgid(t *testing.T) {
	tgid, err := parseStatusTgid([]byte("Name:\tbpf.test\nUmask:\t0022\nState:\tZ (zombie)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\n"))
	require.NoError(t, err)
	assert.Equal(t, uint32(4242), tgid)

	_, err = parseStatusTgid([]byte("Name:\tx\n"))
	assert.ErrorContains(t, err, "no Tgid")
	_, err = parseStatusTgid([]byte("Tgid:\tlots\n"))
	assert.ErrorContains(t, err, `"lots"`)
}

// fakeHost builds a /proc and cgroup tree under a temporary directory: a v2
// hierarchy where memory is enabled on "pod" but not on "pod/c1", and a v1
// memory hierarchy.
type fakeHost struct {
	root, proc, v2, memory string
}

func newFakeHost(t *testing.T) fakeHost {
	root := t.TempDir()
	h := fakeHost{root: root, proc: filepath.Join(root, "proc"), v2: filepath.Join(root, "unified"), memory: filepath.Join(root, "memory")}
	for _, dir := range []string{h.proc, filepath.Join(h.v2, "pod", "c1"), filepath.Join(h.memory, "pod", "c1")} {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(h.v2, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(h.v2, "pod", "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(h.v2, "pod", "c1", "cgroup.controllers"), []byte("cpu\n"), 0o644))
	return h
}

// resolver returns a resolver for the fake host whose mountinfo holds the
// given lines, each with its mount point under the host's root.
func (h fakeHost) resolver(t *testing.T, mounts ...string) procResolver {
	var data string
	for _, m := range mounts {
		data += m + "\n"
	}
	path := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	return newProcResolver(h.proc, cgroup.WithMountinfo(path))
}

// v2Mount and memoryMount are the fake host's mountinfo lines for its v2
// hierarchy (showing the cgroup root) and its v1 memory hierarchy.
func (h fakeHost) v2Mount(root string) string {
	return "41 31 0:38 " + root + " " + h.v2 + " rw - cgroup2 cgroup2 rw"
}

func (h fakeHost) memoryMount() string {
	return "35 31 0:32 / " + h.memory + " rw - cgroup cgroup rw,memory"
}

func (h fakeHost) process(t *testing.T, pid, status, stat, comm, cgroup string) {
	dir := filepath.Join(h.proc, pid)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, data := range map[string]string{"status": status, "stat": stat, "comm": comm, "cgroup": cgroup} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
}

func TestProcResolverFillsVictimFromProc(t *testing.T) {
	h := newFakeHost(t)
	h.process(t, "77", "Name:\tjava\nTgid:\t70\n", "77 (java) R 1 77 77 0 -1 4194560 25 0 0 0\n", "java\n", "4:memory:/pod/c1\n0::/pod/c1\n")
	// An exiting task (PF_EXITING in stat flags) shows "/" on v1.
	h.process(t, "88", "Name:\tjava\nTgid:\t88\n", "88 (java) R 1 88 88 0 -1 4194564 25 0 0 0\n", "java\n", "4:memory:/\n0::/pod/c1\n")
	c1v2, err := cgroup.CgroupID(filepath.Join(h.v2, "pod", "c1"))
	require.NoError(t, err)
	podV2, err := cgroup.CgroupID(filepath.Join(h.v2, "pod"))
	require.NoError(t, err)
	c1Memory, err := cgroup.CgroupID(filepath.Join(h.memory, "pod", "c1"))
	require.NoError(t, err)

	t.Run("v1 memory hierarchy mounted", func(t *testing.T) {
		r := h.resolver(t, h.memoryMount(), h.v2Mount("/"))
		ev := OOMEvent{PID: 77}
		require.NoError(t, r.resolve(&ev))
		assert.Equal(t, OOMEvent{PID: 77, TGID: 70, Comm: "java", CgroupID: c1v2, MemcgID: c1Memory}, ev)
	})
	t.Run("v2 only: memcg is the nearest cgroup with memory enabled", func(t *testing.T) {
		r := h.resolver(t, h.v2Mount("/"))
		ev := OOMEvent{PID: 77, Comm: "from-kernel"}
		require.NoError(t, r.resolve(&ev))
		assert.Equal(t, OOMEvent{PID: 77, TGID: 70, Comm: "from-kernel", CgroupID: c1v2, MemcgID: podV2}, ev)
	})
	t.Run("v2 mount showing another subtree: ids stay zero", func(t *testing.T) {
		r := h.resolver(t, h.v2Mount("/other"))
		ev := OOMEvent{PID: 77}
		require.NoError(t, r.resolve(&ev))
		assert.Equal(t, OOMEvent{PID: 77, TGID: 70, Comm: "java"}, ev)
	})
	t.Run("victim exiting on v1: memcg unknown, not root", func(t *testing.T) {
		r := h.resolver(t, h.memoryMount(), h.v2Mount("/"))
		ev := OOMEvent{PID: 88}
		assert.ErrorContains(t, r.resolve(&ev), "exiting")
		assert.Equal(t, OOMEvent{PID: 88, TGID: 88, Comm: "java", CgroupID: c1v2}, ev)
	})
	t.Run("victim exiting on v2: zombies keep their cgroup", func(t *testing.T) {
		r := h.resolver(t, h.v2Mount("/"))
		ev := OOMEvent{PID: 88}
		require.NoError(t, r.resolve(&ev))
		assert.Equal(t, OOMEvent{PID: 88, TGID: 88, Comm: "java", CgroupID: c1v2, MemcgID: podV2}, ev)
	})
	t.Run("victim gone", func(t *testing.T) {
		r := h.resolver(t, h.memoryMount(), h.v2Mount("/"))
		ev := OOMEvent{PID: 78}
		assert.ErrorContains(t, r.resolve(&ev), "resolve OOM victim 78")
	})
	t.Run("cgroup mounts undetectable: ids stay zero", func(t *testing.T) {
		r := newProcResolver(h.proc, cgroup.WithMountinfo(filepath.Join(h.root, "no-mountinfo")))
		ev := OOMEvent{PID: 77}
		assert.ErrorContains(t, r.resolve(&ev), "detect cgroups")
		assert.Equal(t, OOMEvent{PID: 77, TGID: 70, Comm: "java"}, ev)
	})
}

func TestParseStatFlags(t *testing.T) {
	flags, err := parseStatFlags([]byte("4243 (a) b (c)) Z 1 4243 4243 0 -1 4194316 0 0 0 0 0 0\n"))
	require.NoError(t, err)
	assert.Equal(t, uint64(4194316), flags)
	assert.NotZero(t, flags&pfExiting)

	_, err = parseStatFlags([]byte("4243 no comm"))
	assert.ErrorContains(t, err, "no comm")
	_, err = parseStatFlags([]byte("4243 (a) R 1 2\n"))
	assert.ErrorContains(t, err, "fields")
}

func TestMonotonicToTimeMatchesWallClock(t *testing.T) {
	before := time.Now()
	got := MonotonicToTime(MonotonicNow())
	after := time.Now()
	// A second of slack: only a wrong unit or sign would miss by more.
	assert.False(t, got.Before(before.Add(-time.Second)), "%v before %v", got, before)
	assert.False(t, got.After(after.Add(time.Second)), "%v after %v", got, after)

	ev := OOMEvent{KtimeNS: MonotonicNow() - uint64(time.Hour)}
	assert.InDelta(t, float64(time.Hour), float64(time.Since(ev.Time())), float64(time.Second))
}

func TestResolutionString(t *testing.T) {
	assert.Equal(t, "kernel", ResolvedInKernel.String())
	assert.Equal(t, "proc", ResolvedFromProc.String())
	assert.Equal(t, "unresolved", Unresolved.String())
	assert.Equal(t, "Resolution(9)", Resolution(9).String())
}
