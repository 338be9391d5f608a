// Package cgroup reads the kernel's cgroup files for Kerf's node agent.
//
// It covers three jobs (docs/design.md section 5):
//
//   - Discovery: Detect finds whether the node runs cgroup v2 (unified),
//     v1 (legacy) or both (hybrid), and where each controller is mounted.
//   - Naming: Layout maps a pod and a container to the cgroup the kubelet and
//     the container runtime create for it (systemd and cgroupfs drivers;
//     containerd, CRI-O and Docker), ParseContainerPath maps a cgroup path
//     back, and IDIndex maps a cgroup id (the directory's inode number, as
//     BPF reports it) to a path.
//   - Counters: CPUStatReader, MemoryEventsReader and OOMControlReader keep
//     a cgroup file open and re-read it with pread into their own buffer, so
//     a sampling pass does not allocate. UsageReader does the same for a
//     container's CPU usage, memory working set and peak.
//
// Cgroup paths (as in /proc/<pid>/cgroup) start with "/" and are relative to
// a hierarchy's root; Hierarchy.Path turns one into a file system directory.
package cgroup
