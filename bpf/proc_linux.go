//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procResolver fills the fields of an OOMEvent that the BPF program could not
// read, from /proc/<pid>, while the victim still exists (a zombie keeps its
// /proc entry until its parent reaps it).
type procResolver struct {
	// procRoot is the procfs mount that shows the victims' pid namespace.
	procRoot string
	// mountinfo lists the mounts in which cgroup paths are looked up.
	mountinfo string
}

func newProcResolver(procRoot string) procResolver {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return procResolver{procRoot: procRoot, mountinfo: "/proc/self/mountinfo"}
}

// resolve fills ev.TGID, ev.Comm (when empty), ev.CgroupID and ev.MemcgID
// from /proc/<ev.PID>. An id whose hierarchy is not mounted stays zero. It
// fails, leaving the ids it could not trust zero, when the victim is gone or
// has begun exiting on a v1 memory hierarchy, where proc(5) shows exiting
// tasks in the root cgroup.
func (r procResolver) resolve(ev *OOMEvent) error {
	if err := r.resolveVictim(ev); err != nil {
		return fmt.Errorf("resolve OOM victim %d from %s: %w", ev.PID, r.procRoot, err)
	}
	return nil
}

func (r procResolver) resolveVictim(ev *OOMEvent) error {
	dir := filepath.Join(r.procRoot, strconv.FormatUint(uint64(ev.PID), 10))

	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return err
	}
	if ev.TGID, err = parseStatusTgid(status); err != nil {
		return err
	}
	if ev.Comm == "" {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			return err
		}
		ev.Comm = strings.TrimSuffix(string(comm), "\n")
	}

	mountinfo, err := os.ReadFile(r.mountinfo)
	if err != nil {
		return err
	}
	mounts := parseCgroupMounts(mountinfo)
	cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return err
	}
	v2Path, memPath := parseProcCgroup(cgroups)

	var v2Dir string
	if v2Path != "" && mounts.v2.point != "" {
		if d, ok := mounts.v2.dir(v2Path); ok {
			v2Dir = d
			if ev.CgroupID, err = inode(v2Dir); err != nil {
				return err
			}
		}
	}

	switch {
	case memPath != "" && mounts.memory.point != "":
		// Read the flags after the cgroup file: a task that was not yet
		// exiting then was not exiting when the file was read either.
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			return err
		}
		flags, err := parseStatFlags(stat)
		if err != nil {
			return err
		}
		if flags&pfExiting != 0 {
			return fmt.Errorf("victim is exiting: its v1 memory cgroup is no longer shown")
		}
		if d, ok := mounts.memory.dir(memPath); ok {
			if ev.MemcgID, err = inode(d); err != nil {
				return err
			}
		}
	case v2Dir != "":
		if ev.MemcgID, err = inode(memoryDomain(mounts.v2.point, v2Dir)); err != nil {
			return err
		}
	}
	return nil
}

// pfExiting is PF_EXITING in a task's flags (include/linux/sched.h): set as
// the task starts to exit.
const pfExiting = 0x4

// parseStatFlags returns the flags field (the 9th) of /proc/<pid>/stat.
func parseStatFlags(stat []byte) (uint64, error) {
	// The comm field, in parentheses, may hold spaces and parentheses.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("parse stat: no comm field")
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 7 {
		return 0, fmt.Errorf("parse stat: %d fields after comm, want at least 7", len(fields))
	}
	flags, err := strconv.ParseUint(fields[6], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse stat flags %q: %w", fields[6], err)
	}
	return flags, nil
}

// parseStatusTgid returns the Tgid field of /proc/<pid>/status.
func parseStatusTgid(status []byte) (uint32, error) {
	for line := range bytes.Lines(status) {
		value, ok := bytes.CutPrefix(line, []byte("Tgid:"))
		if !ok {
			continue
		}
		tgid, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("parse status Tgid %q: %w", bytes.TrimSpace(value), err)
		}
		return uint32(tgid), nil
	}
	return 0, fmt.Errorf("parse status: no Tgid field")
}

// parseProcCgroup returns the v2 path (the "0::" line) and the v1 memory
// controller's path from /proc/<pid>/cgroup (proc(5): hierarchy-ID:
// controller-list:cgroup-path). A missing hierarchy gives "".
func parseProcCgroup(data []byte) (v2, memory string) {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		// proc(5) marks a zombie's removed v2 cgroup with " (deleted)".
		p = strings.TrimSuffix(p, " (deleted)")
		if id == "0" && controllers == "" {
			v2 = p
		} else if slices.Contains(strings.Split(controllers, ","), "memory") {
			memory = p
		}
	}
	return v2, memory
}

// cgroupMount is a mounted cgroup hierarchy: root is the cgroup shown at
// point (mountinfo(5) fields 4 and 5).
type cgroupMount struct {
	root, point string
}

// dir returns the directory of the cgroup at path p (as /proc/<pid>/cgroup
// names it) under the mount, and false when the mount does not show it.
func (m cgroupMount) dir(p string) (string, bool) {
	rel, ok := strings.CutPrefix(p, m.root)
	if !ok || (rel != "" && m.root != "/" && !strings.HasPrefix(rel, "/")) {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

type cgroupMounts struct {
	v2, memory cgroupMount
}

// parseCgroupMounts finds the first cgroup2 mount and the first v1 mount
// with the memory controller in mountinfo(5) data.
func parseCgroupMounts(data []byte) cgroupMounts {
	var mounts cgroupMounts
	for line := range strings.Lines(string(data)) {
		pre, post, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " - ")
		if !ok {
			continue
		}
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(postFields) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMountinfo(fields[3]), point: unescapeMountinfo(fields[4])}
		switch postFields[0] {
		case "cgroup2":
			if mounts.v2.point == "" {
				mounts.v2 = m
			}
		case "cgroup":
			if mounts.memory.point == "" && slices.Contains(strings.Split(postFields[2], ","), "memory") {
				mounts.memory = m
			}
		}
	}
	return mounts
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// memoryDomain returns the cgroup v2 directory that holds dir's memory
// controller state: dir itself when its cgroup.controllers lists memory,
// else the nearest such ancestor, else the root at mountPoint.
func memoryDomain(mountPoint, dir string) string {
	for d := dir; d != mountPoint && strings.HasPrefix(d, mountPoint); d = path.Dir(d) {
		controllers, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(controllers)), "memory") {
			return d
		}
	}
	return mountPoint
}

// inode returns the inode number of path, which for a cgroup directory is
// its cgroup id.
func inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}
