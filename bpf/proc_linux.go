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
	"sync"

	"github.com/kerf-dev/kerf/cgroup"
)

// procResolver fills the fields of an OOMEvent that the BPF program could not
// read, from /proc/<pid>, while the victim still exists (a zombie keeps its
// /proc entry until its parent reaps it).
type procResolver struct {
	// procRoot is the procfs mount that shows the victims' pid namespace.
	procRoot string
	// hierarchy returns the cgroup mounts in which cgroup paths are looked
	// up, detected on first use and remembered, error included.
	hierarchy func() (*cgroup.Hierarchy, error)
}

// newProcResolver returns a resolver reading procRoot (default /proc) that
// detects the cgroup mounts with opts the first time it is used.
func newProcResolver(procRoot string, opts ...cgroup.Option) procResolver {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return procResolver{
		procRoot:  procRoot,
		hierarchy: sync.OnceValues(func() (*cgroup.Hierarchy, error) { return cgroup.Detect(opts...) }),
	}
}

// resolve fills ev.TGID, ev.Comm (when empty), ev.CgroupID and ev.MemcgID
// from /proc/<ev.PID>. An id whose hierarchy is not mounted stays zero. It
// fails, leaving the ids it could not trust zero, when the victim is gone,
// when the cgroup mounts cannot be detected, or when the victim has begun
// exiting on a v1 memory hierarchy, where proc(5) shows exiting tasks in the
// root cgroup.
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

	h, err := r.hierarchy()
	if err != nil {
		return err
	}
	cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return err
	}
	v2Path, memPath := parseProcCgroup(cgroups)

	// A cgroup path the mount does not show (outside its root) leaves the
	// id zero, as an unmounted hierarchy does.
	v2, hasV2 := h.Unified()
	var v2Dir string
	if v2Path != "" && hasV2 {
		if d, err := v2.Join(v2Path); err == nil {
			v2Dir = d
			if ev.CgroupID, err = cgroup.CgroupID(v2Dir); err != nil {
				return err
			}
		}
	}

	// Controller prefers a v1 memory tree over the v2 one.
	memory, hasMemory := h.Controller("memory")
	switch {
	case memPath != "" && hasMemory && memory.Version == 1:
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
		if d, err := memory.Join(memPath); err == nil {
			if ev.MemcgID, err = cgroup.CgroupID(d); err != nil {
				return err
			}
		}
	case v2Dir != "":
		if ev.MemcgID, err = cgroup.CgroupID(memoryDomain(v2, v2Dir)); err != nil {
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

// memoryDomain returns the cgroup v2 directory that holds dir's memory
// controller state: dir itself when its cgroup.controllers lists memory,
// else the nearest such ancestor, else the top of the mount m. (The cgroup
// package's Mount.Controllers only knows the mount's top directory.)
func memoryDomain(m cgroup.Mount, dir string) string {
	for d := dir; d != m.Path && strings.HasPrefix(d, m.Path); d = path.Dir(d) {
		controllers, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(controllers)), "memory") {
			return d
		}
	}
	return m.Path
}
