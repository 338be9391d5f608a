package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// detectFixture runs Detect on a fixture tree under testdata.
func detectFixture(t *testing.T, name string) (*Hierarchy, string) {
	t.Helper()
	dir := filepath.Join("testdata", name)
	h, err := Detect(WithMountinfo(filepath.Join(dir, "mountinfo")), WithHostRoot(dir))
	require.NoError(t, err)
	return h, dir
}

func TestDetectFindsModeAndControllerMounts(t *testing.T) {
	tests := []struct {
		fixture     string
		mode        Mode
		controllers map[string]string // controller -> mount under the fixture; "" = not mounted
		memoryV     int
		unified     string
	}{
		{
			fixture: "unified-systemd-containerd",
			mode:    ModeUnified,
			controllers: map[string]string{
				"cpu": "sys/fs/cgroup", "memory": "sys/fs/cgroup", "cpuacct": "", "name=systemd": "",
			},
			memoryV: 2,
			unified: "sys/fs/cgroup",
		},
		{
			fixture:     "unified-cgroupfs-crio",
			mode:        ModeUnified,
			controllers: map[string]string{"cpu": "sys/fs/cgroup", "memory": "sys/fs/cgroup", "hugetlb": ""},
			memoryV:     2,
			unified:     "sys/fs/cgroup",
		},
		{
			fixture: "legacy-systemd-docker",
			mode:    ModeLegacy,
			controllers: map[string]string{
				"cpu": "sys/fs/cgroup/cpu,cpuacct", "cpuacct": "sys/fs/cgroup/cpu,cpuacct",
				"memory": "sys/fs/cgroup/memory", "net_prio": "sys/fs/cgroup/net_cls,net_prio",
				"name=systemd": "sys/fs/cgroup/systemd", "hugetlb": "",
			},
			memoryV: 1,
		},
		{
			fixture: "legacy-cgroupfs-containerd",
			mode:    ModeLegacy,
			controllers: map[string]string{
				"cpu": "sys/fs/cgroup/cpu,cpuacct", "memory": "sys/fs/cgroup/memory",
				"cpuset": "sys/fs/cgroup/cpuset", "clone_children": "",
			},
			memoryV: 1,
		},
		{
			fixture: "hybrid-systemd-crio",
			mode:    ModeHybrid,
			controllers: map[string]string{
				"cpu": "sys/fs/cgroup/cpu,cpuacct", "memory": "sys/fs/cgroup/memory",
				"hugetlb": "sys/fs/cgroup/hugetlb", "pids": "",
			},
			memoryV: 1,
			unified: "sys/fs/cgroup/unified",
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			h, dir := detectFixture(t, tt.fixture)
			assert.Equal(t, tt.mode, h.Mode)
			for ctrl, want := range tt.controllers {
				got, ok := h.ControllerPath(ctrl)
				if want == "" {
					assert.False(t, ok, "controller %s should not be mounted, got %s", ctrl, got)
					continue
				}
				if assert.True(t, ok, "controller %s", ctrl) {
					assert.Equal(t, filepath.Join(dir, want), got, "controller %s", ctrl)
				}
			}
			m, ok := h.Controller("memory")
			require.True(t, ok)
			assert.Equal(t, tt.memoryV, m.Version)
			u, ok := h.Unified()
			if tt.unified == "" {
				assert.False(t, ok)
			} else if assert.True(t, ok) {
				assert.Equal(t, filepath.Join(dir, tt.unified), u.Path)
			}
		})
	}
}

func TestDetectReadsV2ControllersFromCgroupControllers(t *testing.T) {
	h, _ := detectFixture(t, "hybrid-systemd-crio")
	u, ok := h.Unified()
	require.True(t, ok)
	assert.Empty(t, u.Controllers, "the hybrid fixture's v2 tree holds no controllers")

	h, _ = detectFixture(t, "unified-cgroupfs-crio")
	u, ok = h.Unified()
	require.True(t, ok)
	assert.Equal(t, []string{"cpuset", "cpu", "io", "memory", "pids"}, u.Controllers)
}

func TestDetectTreatsNamedOnlyV1TreeAsUnified(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory\n"), 0o644))
	mi := "30 23 0:26 / / rw - cgroup2 cgroup2 rw\n" +
		"31 30 0:27 / /systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
	writeFile(t, filepath.Join(dir, "mountinfo"), mi)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "systemd"), 0o755))
	h, err := Detect(WithMountinfo(filepath.Join(dir, "mountinfo")), WithHostRoot(dir))
	require.NoError(t, err)
	assert.Equal(t, ModeUnified, h.Mode)
	p, ok := h.ControllerPath("name=systemd")
	assert.True(t, ok)
	assert.Equal(t, filepath.Join(dir, "systemd"), p)
}

func TestDetectKeepsWholeTreeMountOfAHierarchyMountedTwice(t *testing.T) {
	dir := t.TempDir()
	mi := "40 23 0:30 /kubepods /host/cpu rw - cgroup cgroup rw,cpu,cpuacct\n" +
		"41 23 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
		"42 23 0:30 / /mnt/again rw - cgroup cgroup rw,cpu,cpuacct\n"
	writeFile(t, filepath.Join(dir, "mountinfo"), mi)
	h, err := Detect(WithMountinfo(filepath.Join(dir, "mountinfo")))
	require.NoError(t, err)
	require.Len(t, h.Mounts, 1)
	assert.Equal(t, Mount{Path: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Version: 1, Controllers: []string{"cpu", "cpuacct"}}, h.Mounts[0])
	assert.Equal(t, ModeLegacy, h.Mode)
}

func TestDetectFailsWithoutCgroupMounts(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mountinfo")
	writeFile(t, p, "22 1 0:21 / /proc rw - proc proc rw\n")
	_, err := Detect(WithMountinfo(p))
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "no cgroup")
}

func TestDetectNamesFileAndLineOfMalformedMountinfo(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mountinfo")
	writeFile(t, p, "22 1 0:21 / /proc rw - proc proc rw\n23 1 0:22 / /sys rw sysfs\n")
	_, err := Detect(WithMountinfo(p))
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "line 2")
}

func TestDetectFailsWhenV2ControllersUnreadable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mountinfo")
	writeFile(t, p, "30 23 0:26 / /cg rw - cgroup2 cgroup2 rw\n")
	_, err := Detect(WithMountinfo(p), WithHostRoot(dir))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cgroup.controllers")
}

func TestDetectReadsThisMachine(t *testing.T) {
	h, err := Detect()
	if err != nil {
		t.Skipf("no cgroups on this machine: %v", err)
	}
	assert.NotZero(t, h.Mode)
	assert.NotEmpty(t, h.Mounts)
}

func TestParseMountinfoLine(t *testing.T) {
	tests := []struct {
		name, line string
		want       mountinfoEntry
		wantErr    bool
	}{
		{
			name: "v1 co-mounted controllers",
			line: "27 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct",
			want: mountinfoEntry{root: "/", mountPoint: "/sys/fs/cgroup/cpu,cpuacct", fsType: "cgroup", superOptions: "rw,cpu,cpuacct"},
		},
		{
			name: "no optional fields",
			line: "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
			want: mountinfoEntry{root: "/", mountPoint: "/sys/fs/cgroup/unified", fsType: "cgroup2", superOptions: "rw"},
		},
		{
			name: "several optional fields",
			line: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:2 propagate_from:3 - ext3 /dev/root rw,errors=continue",
			want: mountinfoEntry{root: "/mnt1", mountPoint: "/mnt2", fsType: "ext3", superOptions: "rw,errors=continue"},
		},
		{
			name: "octal escapes in paths",
			line: `31 1 0:45 /a\134b /var/my\040cache\011x rw - tmpfs tmpfs rw`,
			want: mountinfoEntry{root: `/a\b`, mountPoint: "/var/my cache\tx", fsType: "tmpfs", superOptions: "rw"},
		},
		{
			name: "invalid escape kept as is",
			line: `31 1 0:45 / /x\9y\400 rw - tmpfs tmpfs rw`,
			want: mountinfoEntry{root: "/", mountPoint: `/x\9y\400`, fsType: "tmpfs", superOptions: "rw"},
		},
		{
			// containerd and CNI bind-mount network namespaces; the root of
			// an nsfs mount is not a path.
			name: "namespace file bind mount",
			line: "47 27 0:4 net:[4026532401] /var/lib/kerf-sandbox/containerd/netns/cni-1 rw shared:5 - nsfs nsfs rw",
			want: mountinfoEntry{root: "net:[4026532401]", mountPoint: "/var/lib/kerf-sandbox/containerd/netns/cni-1", fsType: "nsfs", superOptions: "rw"},
		},
		{name: "empty root", line: "27 25 0:27  /sys rw - cgroup cgroup rw", wantErr: true},
		{name: "no separator", line: "27 25 0:27 / /sys/fs/cgroup/cpu rw shared:11 cgroup cgroup rw,cpu", wantErr: true},
		{name: "too few fields after separator", line: "27 25 0:27 / /sys/fs/cgroup/cpu rw shared:11 - cgroup rw,cpu", wantErr: true},
		{name: "too many fields after separator", line: "27 25 0:27 / /sys rw - cgroup cgroup rw extra", wantErr: true},
		{name: "relative mount point", line: "27 25 0:27 / sys rw - cgroup cgroup rw", wantErr: true},
		{name: "empty", line: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfoLine(tt.line)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestV1ControllersSkipsMountFlags(t *testing.T) {
	tests := map[string][]string{
		"rw,cpu,cpuacct":                        {"cpu", "cpuacct"},
		"rw,xattr,name=systemd":                 {"name=systemd"},
		"rw,cpuset,clone_children,noprefix":     {"cpuset"},
		"ro,memory,release_agent=/sbin/release": {"memory"},
		"rw,none,name=foo":                      {"name=foo"},
		"rw":                                    nil,
	}
	for opts, want := range tests {
		assert.Equal(t, want, v1Controllers(opts), opts)
	}
}

func TestMountJoinStripsMountRoot(t *testing.T) {
	tests := []struct {
		name       string
		m          Mount
		cgroupPath string
		want       string
		wantErr    bool
	}{
		{name: "root mount", m: Mount{Path: "/sys/fs/cgroup/cpu", Root: "/"}, cgroupPath: "/kubepods/pod1", want: "/sys/fs/cgroup/cpu/kubepods/pod1"},
		{name: "cgroup root itself", m: Mount{Path: "/sys/fs/cgroup", Root: "/"}, cgroupPath: "/", want: "/sys/fs/cgroup"},
		{name: "subtree mount", m: Mount{Path: "/host/cg", Root: "/kubepods"}, cgroupPath: "/kubepods/burstable/pod1", want: "/host/cg/burstable/pod1"},
		{name: "subtree mount top", m: Mount{Path: "/host/cg", Root: "/kubepods"}, cgroupPath: "/kubepods", want: "/host/cg"},
		{name: "outside subtree", m: Mount{Path: "/host/cg", Root: "/kubepods"}, cgroupPath: "/kubepods2/x", wantErr: true},
		{name: "dot-dot cannot escape", m: Mount{Path: "/sys/fs/cgroup", Root: "/"}, cgroupPath: "/../../etc", want: "/sys/fs/cgroup/etc"},
		{name: "relative path", m: Mount{Path: "/sys/fs/cgroup", Root: "/"}, cgroupPath: "kubepods", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.m.Join(tt.cgroupPath)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMountRelIsTheInverseOfJoin(t *testing.T) {
	tests := []struct {
		name    string
		m       Mount
		dir     string
		want    string
		wantErr bool
	}{
		{name: "root mount", m: Mount{Path: "/sys/fs/cgroup/cpu", Root: "/"}, dir: "/sys/fs/cgroup/cpu/kubepods/pod1", want: "/kubepods/pod1"},
		{name: "mount top", m: Mount{Path: "/sys/fs/cgroup", Root: "/"}, dir: "/sys/fs/cgroup/", want: "/"},
		{name: "subtree mount", m: Mount{Path: "/host/cg", Root: "/kubepods"}, dir: "/host/cg/burstable", want: "/kubepods/burstable"},
		{name: "outside the mount", m: Mount{Path: "/sys/fs/cgroup/cpu", Root: "/"}, dir: "/sys/fs/cgroup/memory/x", wantErr: true},
		{name: "sibling with a common prefix", m: Mount{Path: "/sys/fs/cgroup/cpu", Root: "/"}, dir: "/sys/fs/cgroup/cpu,cpuacct", wantErr: true},
		{name: "relative dir", m: Mount{Path: "/sys/fs/cgroup", Root: "/"}, dir: "kubepods", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.m.Rel(tt.dir)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			back, err := tt.m.Join(got)
			require.NoError(t, err)
			assert.Equal(t, filepath.Clean(tt.dir), back)
		})
	}
}

func TestHierarchyPathNamesUnmountedController(t *testing.T) {
	h, _ := detectFixture(t, "hybrid-systemd-crio")
	_, err := h.Path("pids", "/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"pids"`)
}

func TestModeString(t *testing.T) {
	assert.Equal(t, "unified", ModeUnified.String())
	assert.Equal(t, "legacy", ModeLegacy.String())
	assert.Equal(t, "hybrid", ModeHybrid.String())
	assert.Equal(t, "Mode(0)", Mode(0).String())
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}
