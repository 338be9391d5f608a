package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Mode says which cgroup versions a node has mounted.
type Mode int

// The cgroup setups a node can have. The names follow systemd's.
const (
	// ModeUnified is cgroup v2 only: one tree holds every controller.
	ModeUnified Mode = iota + 1
	// ModeLegacy is cgroup v1 only: one tree per controller (or group of
	// co-mounted controllers such as cpu,cpuacct).
	ModeLegacy
	// ModeHybrid is v1 controller trees plus a v2 tree (usually at
	// /sys/fs/cgroup/unified) that holds few or no controllers.
	ModeHybrid
)

// String returns the systemd name of the mode: unified, legacy or hybrid.
func (m Mode) String() string {
	switch m {
	case ModeUnified:
		return "unified"
	case ModeLegacy:
		return "legacy"
	case ModeHybrid:
		return "hybrid"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Mount is one mounted cgroup hierarchy.
type Mount struct {
	// Path is where the hierarchy is mounted, prefixed by the host root
	// given to Detect, e.g. /sys/fs/cgroup/cpu,cpuacct.
	Path string
	// Root is the cgroup path of the mount's top directory within the
	// hierarchy (mountinfo field 4): "/" unless the mount shows a subtree,
	// as a bind mount or a cgroup namespace does.
	Root string
	// Version is 1 or 2.
	Version int
	// Controllers lists the controllers bound to the hierarchy, e.g. cpu
	// and cpuacct. A v1 named hierarchy appears as "name=systemd". For v2
	// it is the content of the mount's cgroup.controllers.
	Controllers []string
}

// Join returns the directory of cgroupPath (absolute within the hierarchy,
// e.g. "/kubepods/pod<uid>") under this mount.
func (m Mount) Join(cgroupPath string) (string, error) {
	if !strings.HasPrefix(cgroupPath, "/") {
		return "", fmt.Errorf("cgroup path %q: must start with /", cgroupPath)
	}
	p := path.Clean(cgroupPath)
	rel := p
	if m.Root != "/" {
		switch {
		case p == m.Root:
			rel = "/"
		case strings.HasPrefix(p, m.Root+"/"):
			rel = p[len(m.Root):]
		default:
			return "", fmt.Errorf("cgroup path %q is outside the mount at %s (its root is %s)", cgroupPath, m.Path, m.Root)
		}
	}
	return filepath.Join(m.Path, rel), nil
}

// Rel returns the cgroup path of dir, a directory at or below the mount; it
// is the inverse of Join.
func (m Mount) Rel(dir string) (string, error) {
	rel, err := filepath.Rel(m.Path, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("directory %s is not under the cgroup mount at %s", dir, m.Path)
	}
	return path.Join(m.Root, filepath.ToSlash(rel)), nil
}

// Hierarchy is the node's cgroup setup as read from mountinfo.
type Hierarchy struct {
	// Mode is the setup: unified, legacy or hybrid.
	Mode Mode
	// Mounts holds one entry per hierarchy: each v1 controller tree and the
	// v2 tree, in mountinfo order.
	Mounts []Mount
}

// Controller returns the mount that serves controller (e.g. "cpu",
// "memory", "name=systemd"): its v1 tree if it has one, else the v2 tree if
// the controller is enabled there.
func (h *Hierarchy) Controller(controller string) (Mount, bool) {
	for _, m := range h.Mounts {
		if m.Version == 1 && slices.Contains(m.Controllers, controller) {
			return m, true
		}
	}
	if m, ok := h.Unified(); ok && slices.Contains(m.Controllers, controller) {
		return m, true
	}
	return Mount{}, false
}

// ControllerPath returns where controller's hierarchy is mounted.
func (h *Hierarchy) ControllerPath(controller string) (string, bool) {
	m, ok := h.Controller(controller)
	return m.Path, ok
}

// Unified returns the v2 tree, which exists in unified and hybrid mode.
// BPF's bpf_get_current_cgroup_id reports ids from this tree.
func (h *Hierarchy) Unified() (Mount, bool) {
	for _, m := range h.Mounts {
		if m.Version == 2 {
			return m, true
		}
	}
	return Mount{}, false
}

// Path returns the directory of cgroupPath in controller's hierarchy.
func (h *Hierarchy) Path(controller, cgroupPath string) (string, error) {
	m, ok := h.Controller(controller)
	if !ok {
		return "", fmt.Errorf("cgroup controller %q is not mounted", controller)
	}
	return m.Join(cgroupPath)
}

// OpenCPUStat opens cpu.stat of cgroupPath in the cpu controller's hierarchy.
func (h *Hierarchy) OpenCPUStat(cgroupPath string) (*CPUStatReader, error) {
	dir, err := h.Path("cpu", cgroupPath)
	if err != nil {
		return nil, err
	}
	return OpenCPUStat(dir)
}

// OpenOOMKills opens the file that counts OOM kills of cgroupPath:
// memory.events on v2, memory.oom_control on v1.
func (h *Hierarchy) OpenOOMKills(cgroupPath string) (OOMKillReader, error) {
	m, ok := h.Controller("memory")
	if !ok {
		return nil, errors.New("cgroup controller \"memory\" is not mounted")
	}
	dir, err := m.Join(cgroupPath)
	if err != nil {
		return nil, err
	}
	return OpenOOMKillsAt(m, dir)
}

// OpenOOMKillsAt opens the OOM kill counter in dir, a cgroup directory of
// the memory controller's mount m: memory.events on v2, memory.oom_control
// on v1.
func OpenOOMKillsAt(m Mount, dir string) (OOMKillReader, error) {
	if m.Version == 2 {
		r, err := OpenMemoryEvents(dir)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	r, err := OpenOOMControl(dir)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Option configures Detect.
type Option func(*detectConfig)

type detectConfig struct {
	mountinfo string
	hostRoot  string
}

// WithMountinfo reads mounts from path instead of /proc/self/mountinfo; an
// agent in a container passes /proc/1/mountinfo of the host (with hostPID),
// tests pass a fixture.
func WithMountinfo(path string) Option {
	return func(c *detectConfig) { c.mountinfo = path }
}

// WithHostRoot prefixes every mount point with dir, for an agent that sees
// the host's file system under e.g. /host, or a fixture tree.
func WithHostRoot(dir string) Option {
	return func(c *detectConfig) { c.hostRoot = dir }
}

// Detect reads the mount table and returns the node's cgroup hierarchy.
func Detect(opts ...Option) (*Hierarchy, error) {
	cfg := detectConfig{mountinfo: "/proc/self/mountinfo"}
	for _, o := range opts {
		o(&cfg)
	}
	data, err := os.ReadFile(cfg.mountinfo)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w", err)
	}
	h, err := hierarchyFromMountinfo(string(data), cfg.hostRoot)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups from %s: %w", cfg.mountinfo, err)
	}
	return h, nil
}

// hierarchyFromMountinfo builds a Hierarchy from mountinfo content. It reads
// cgroup.controllers of the v2 mount.
func hierarchyFromMountinfo(data, hostRoot string) (*Hierarchy, error) {
	h := &Hierarchy{}
	v1 := false
	for n, line := range strings.Split(data, "\n") {
		if line == "" {
			continue
		}
		e, err := parseMountinfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		var m Mount
		switch e.fsType {
		case "cgroup":
			m = Mount{Version: 1, Controllers: v1Controllers(e.superOptions)}
			if len(m.Controllers) == 0 {
				continue
			}
		case "cgroup2":
			m = Mount{Version: 2}
		default:
			continue
		}
		m.Path = filepath.Join(hostRoot, e.mountPoint)
		m.Root = e.root
		if i := h.sameHierarchy(m); i >= 0 {
			// A hierarchy mounted twice: keep the first mount, unless only a
			// later one shows the whole tree.
			if h.Mounts[i].Root != "/" && m.Root == "/" {
				h.Mounts[i] = m
			}
			continue
		}
		h.Mounts = append(h.Mounts, m)
		if m.Version == 1 && !namedOnly(m.Controllers) {
			v1 = true
		}
	}
	_, v2 := h.Unified()
	switch {
	case v1 && v2:
		h.Mode = ModeHybrid
	case v1:
		h.Mode = ModeLegacy
	case v2:
		h.Mode = ModeUnified
	default:
		return nil, errors.New("no cgroup controller mounts (fstype cgroup or cgroup2)")
	}
	for i, m := range h.Mounts {
		if m.Version != 2 {
			continue
		}
		p := filepath.Join(m.Path, "cgroup.controllers")
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read v2 controllers: %w", err)
		}
		h.Mounts[i].Controllers = strings.Fields(string(b))
		h.Mounts[i].Root = outsideNamespaceRoot(h.Mounts[i])
	}
	return h, nil
}

// outsideNamespaceRoot returns the root of a v2 mount seen from inside a
// cgroup namespace. There mountinfo gives the root relative to the
// namespace's own, "/../../../.." for the host's /sys/fs/cgroup mounted
// into a container of kubepods/<qos>/pod<uid>/<id> (containerd gives
// every container its own cgroup namespace on cgroup v2): the mount shows
// cgroups above the namespace, whose absolute paths mountinfo does not
// tell. When its top directory is the hierarchy's root, the only cgroup
// without cgroup.events, the root is "/"; otherwise it is left as is and
// Join refuses the paths.
func outsideNamespaceRoot(m Mount) string {
	if m.Root != "/.." && !strings.HasPrefix(m.Root, "/../") {
		return m.Root
	}
	if _, err := os.Stat(filepath.Join(m.Path, "cgroup.events")); errors.Is(err, os.ErrNotExist) {
		return "/"
	}
	return m.Root
}

// sameHierarchy returns the index of a mount of the same hierarchy as m, or -1.
func (h *Hierarchy) sameHierarchy(m Mount) int {
	for i, o := range h.Mounts {
		if o.Version == m.Version && slices.Equal(o.Controllers, m.Controllers) {
			return i
		}
	}
	return -1
}

// namedOnly reports whether a v1 hierarchy has no real controller, like the
// name=systemd tree that some v2 hosts keep for old containers.
func namedOnly(controllers []string) bool {
	for _, c := range controllers {
		if !strings.HasPrefix(c, "name=") {
			return false
		}
	}
	return true
}

// v1Controllers picks the controllers out of a v1 mount's super options
// (e.g. "rw,cpu,cpuacct" or "rw,xattr,name=systemd").
func v1Controllers(superOptions string) []string {
	var cs []string
	for _, o := range strings.Split(superOptions, ",") {
		switch {
		case o == "", o == "rw", o == "ro", o == "none", o == "noprefix", o == "clone_children",
			o == "xattr", o == "cpuset_v2_mode", o == "favordynmods", o == "nofavordynmods":
		case strings.HasPrefix(o, "name="):
			cs = append(cs, o)
		case strings.Contains(o, "="): // release_agent=..., other settings
		default:
			cs = append(cs, o)
		}
	}
	return cs
}

// mountinfoEntry holds the fields of one mountinfo line that Detect needs.
type mountinfoEntry struct {
	root, mountPoint, fsType, superOptions string
}

// parseMountinfoLine parses one line of /proc/<pid>/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Fields 7.. are optional and end with "-"; then come fstype, source and
// super options.
func parseMountinfoLine(line string) (mountinfoEntry, error) {
	fields := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 10 || sep < 0 || len(fields)-sep != 4 {
		return mountinfoEntry{}, fmt.Errorf("malformed mountinfo line %q: want \"id parent major:minor root mountpoint options [optional...] - fstype source superoptions\"", truncate(line))
	}
	// The root is a path within the filesystem, except on pseudo
	// filesystems: a bind mount of a namespace file (nsfs, as CNI and
	// containerd make under /run/netns) has the root "net:[4026532401]".
	if !strings.Contains(fields[2], ":") || fields[3] == "" || !strings.HasPrefix(fields[4], "/") {
		return mountinfoEntry{}, fmt.Errorf("malformed mountinfo line %q: bad major:minor, root or mount point", truncate(line))
	}
	return mountinfoEntry{
		root:         unescapeOctal(fields[3]),
		mountPoint:   unescapeOctal(fields[4]),
		fsType:       fields[sep+1],
		superOptions: fields[sep+3],
	}, nil
}

// unescapeOctal decodes the \ooo escapes (space, tab, newline, backslash)
// the kernel writes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 120
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
