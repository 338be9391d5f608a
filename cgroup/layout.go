package cgroup

import (
	"fmt"
	"strings"
)

// Driver is the kubelet's cgroup driver (its --cgroup-driver flag).
type Driver string

// The kubelet's cgroup drivers.
const (
	// DriverSystemd names cgroups as systemd slices and scopes:
	// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope.
	DriverSystemd Driver = "systemd"
	// DriverCgroupfs names cgroups as plain directories:
	// /kubepods/burstable/pod<uid>/<id>.
	DriverCgroupfs Driver = "cgroupfs"
)

// QoSClass is a pod's Kubernetes QoS class; the values match
// corev1.PodQOSClass.
type QoSClass string

// The Kubernetes QoS classes.
const (
	QoSGuaranteed QoSClass = "Guaranteed"
	QoSBurstable  QoSClass = "Burstable"
	QoSBestEffort QoSClass = "BestEffort"
)

// Runtime is a container runtime, as named by the scheme of
// containerStatuses[].containerID.
type Runtime string

// The container runtimes Kerf knows the cgroup naming of.
const (
	RuntimeContainerd Runtime = "containerd"
	RuntimeCRIO       Runtime = "cri-o"
	RuntimeDocker     Runtime = "docker"
)

// PodCgroup is what decides where a pod's cgroup lives.
type PodCgroup struct {
	// UID is metadata.uid.
	UID string
	// QoS is status.qosClass.
	QoS QoSClass
}

// Layout is how the kubelet on a node names cgroups.
type Layout struct {
	// Driver is the kubelet's --cgroup-driver.
	Driver Driver
	// Root is the kubelet's --cgroup-root, a cgroupfs-style path; empty
	// means "/".
	Root string
}

// KubepodsDir returns the cgroup path of the cgroup that holds all pods,
// e.g. /kubepods.slice or /kubepods.
func (l Layout) KubepodsDir() (string, error) {
	names, err := l.rootNames()
	if err != nil {
		return "", err
	}
	return l.format(append(names, "kubepods"))
}

// PodDir returns the cgroup path of a pod, e.g.
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice.
func (l Layout) PodDir(pod PodCgroup) (string, error) {
	names, err := l.podNames(pod)
	if err != nil {
		return "", err
	}
	return l.format(names)
}

// ContainerDir returns the cgroup path of a container, given its
// containerStatuses[].containerID (e.g. "containerd://<id>").
func (l Layout) ContainerDir(pod PodCgroup, containerID string) (string, error) {
	runtime, id, err := ParseContainerID(containerID)
	if err != nil {
		return "", err
	}
	names, err := l.podNames(pod)
	if err != nil {
		return "", err
	}
	dir, err := l.format(names)
	if err != nil {
		return "", err
	}
	// The runtime names the container's cgroup: CRI-O's cgroupfs manager
	// uses crio-<id>, containerd and Docker use the bare id; under systemd
	// each makes a scope <prefix>-<id>.scope.
	leaf := id
	switch {
	case l.Driver == DriverSystemd:
		prefix, _ := scopePrefix(runtime)
		leaf = prefix + id + ".scope"
	case runtime == RuntimeCRIO:
		leaf = "crio-" + id
	}
	return dir + "/" + leaf, nil
}

// scopePrefixes holds each runtime's systemd scope name prefix.
var scopePrefixes = [...]struct {
	runtime Runtime
	prefix  string
}{
	{RuntimeContainerd, "cri-containerd-"},
	{RuntimeCRIO, "crio-"},
	{RuntimeDocker, "docker-"},
}

// scopePrefix returns r's systemd scope name prefix; ok is false for an
// unknown runtime.
func scopePrefix(r Runtime) (prefix string, ok bool) {
	for _, s := range scopePrefixes {
		if s.runtime == r {
			return s.prefix, true
		}
	}
	return "", false
}

// rootNames splits Root into components, as the kubelet's
// ParseCgroupfsToCgroupName does.
func (l Layout) rootNames() ([]string, error) {
	switch l.Driver {
	case DriverSystemd, DriverCgroupfs:
	default:
		return nil, fmt.Errorf("cgroup driver %q: must be %q or %q", l.Driver, DriverSystemd, DriverCgroupfs)
	}
	root := l.Root
	if root == "" || root == "/" {
		return nil, nil
	}
	if !strings.HasPrefix(root, "/") {
		return nil, fmt.Errorf("cgroup root %q: must be an absolute path", l.Root)
	}
	names := strings.Split(strings.Trim(root, "/"), "/")
	for _, n := range names {
		if n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("cgroup root %q: must be a clean path without empty, . or .. components", l.Root)
		}
	}
	return names, nil
}

// podNames returns the kubelet's abstract cgroup name of a pod:
// root..., kubepods, [burstable|besteffort], pod<uid>.
func (l Layout) podNames(pod PodCgroup) ([]string, error) {
	names, err := l.rootNames()
	if err != nil {
		return nil, err
	}
	if !validUID(pod.UID) {
		return nil, fmt.Errorf("pod UID %q: must be a UUID (8-4-4-4-12 lowercase hex digits) or 32 lowercase hex digits", pod.UID)
	}
	names = append(names, "kubepods")
	switch pod.QoS {
	case QoSGuaranteed:
	case QoSBurstable:
		names = append(names, "burstable")
	case QoSBestEffort:
		names = append(names, "besteffort")
	default:
		return nil, fmt.Errorf("pod QoS class %q: must be %q, %q or %q", pod.QoS, QoSGuaranteed, QoSBurstable, QoSBestEffort)
	}
	return append(names, "pod"+pod.UID), nil
}

// format turns an abstract cgroup name into a path the way the kubelet's
// CgroupName.ToCgroupfs and ToSystemd do: with systemd each name becomes a
// slice whose unit name carries its ancestors' names joined by "-", and "-"
// inside a name becomes "_".
func (l Layout) format(names []string) (string, error) {
	var b strings.Builder
	if l.Driver == DriverCgroupfs {
		for _, n := range names {
			b.WriteString("/")
			b.WriteString(n)
		}
		return b.String(), nil
	}
	prefix := ""
	for _, n := range names {
		n = strings.ReplaceAll(n, "-", "_")
		b.WriteString("/")
		b.WriteString(prefix)
		b.WriteString(n)
		b.WriteString(".slice")
		prefix += n + "-"
	}
	return b.String(), nil
}

// ParseContainerID splits a containerStatuses[].containerID such as
// "containerd://<id>" into its runtime and id.
func ParseContainerID(containerID string) (Runtime, string, error) {
	scheme, id, ok := strings.Cut(containerID, "://")
	if !ok {
		return "", "", fmt.Errorf("container ID %q: must be <runtime>://<id>", truncate(containerID))
	}
	r := Runtime(scheme)
	if _, known := scopePrefix(r); !known {
		return "", "", fmt.Errorf("container ID %q: runtime %q: must be %q, %q or %q",
			truncate(containerID), truncate(scheme), RuntimeContainerd, RuntimeCRIO, RuntimeDocker)
	}
	if !validContainerID(id) {
		return "", "", fmt.Errorf("container ID %q: id must be 1 to 64 lowercase hex digits", truncate(containerID))
	}
	return r, id, nil
}

// ParseContainerPath finds the pod and container a cgroup path belongs to.
// It accepts a cgroup path or a file system path, either driver's naming
// and any cgroup root; a path below a container's cgroup belongs to that
// container. ok is false for cgroups outside a container: system cgroups,
// QoS and pod cgroups, CRI-O's conmon scopes. The sandbox (pause) container
// has a cgroup like any container and parses as one.
func ParseContainerPath(p string) (podUID, containerID string, ok bool) {
	kubepods := false
	pod := ""
	var podDriver Driver
	for p != "" {
		var c string
		if i := strings.IndexByte(p, '/'); i >= 0 {
			c, p = p[:i], p[i+1:]
		} else {
			c, p = p, ""
		}
		if c == "" {
			continue
		}
		if pod != "" {
			if id, ok := containerLeaf(podDriver, c); ok {
				return pod, id, true
			}
			return "", "", false
		}
		switch {
		case c == "kubepods":
			kubepods = true
		case kubepods && strings.HasPrefix(c, "pod") && validUID(c[3:]):
			pod, podDriver = c[3:], DriverCgroupfs
		case strings.HasSuffix(c, ".slice"):
			if uid, ok := systemdPodSlice(strings.TrimSuffix(c, ".slice")); ok {
				pod, podDriver = uid, DriverSystemd
			}
		}
	}
	return "", "", false
}

// systemdPodSlice parses a pod slice's unit name without ".slice", e.g.
// kubepods-burstable-pod<uid_>, and returns the pod UID.
func systemdPodSlice(name string) (string, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !strings.HasPrefix(name[i+1:], "pod") {
		return "", false
	}
	uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
	if !validUID(uid) {
		return "", false
	}
	for part := range strings.SplitSeq(name[:i], "-") {
		if part == "kubepods" {
			return uid, true
		}
	}
	return "", false
}

// containerLeaf parses the name of a container's cgroup under its pod's.
func containerLeaf(d Driver, c string) (string, bool) {
	if d == DriverSystemd {
		name, ok := strings.CutSuffix(c, ".scope")
		if !ok {
			return "", false
		}
		for _, s := range scopePrefixes {
			if id, ok := strings.CutPrefix(name, s.prefix); ok && validContainerID(id) {
				return id, true
			}
		}
		return "", false
	}
	id := strings.TrimPrefix(c, "crio-")
	return id, validContainerID(id)
}

// validUID reports whether s has the form of a pod UID: a UUID as the
// apiserver assigns, or 32 hex digits as the kubelet gives static pods.
func validUID(s string) bool {
	switch len(s) {
	case 32:
		return isLowerHex(s)
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isLowerHexByte(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// validContainerID reports whether s looks like a container id: the
// runtimes Kerf supports all use 64 lowercase hex digits.
func validContainerID(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLowerHexByte(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHexByte(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }
