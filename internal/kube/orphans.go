package kube

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirPrefix names the temporary directories of control planes; each holds
// an ownerFile.
const dirPrefix = "kerf-controlplane-"

// ownerFile, in a control plane's directory, holds the PID and the start
// time (in clock ticks since boot, /proc/<pid>/stat field 22) of the
// process that started it, so that a later Start can tell a control plane
// whose owner died from one in use.
const ownerFile = "owner"

// processStart returns the start time of process pid in clock ticks since
// boot, which with the PID names a process even after the PID is reused.
func processStart(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command, field 2, is in parentheses and may hold spaces.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	fields := strings.Fields(string(raw[end+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// MakeDir reaps the control planes whose owner is gone (ReapOrphans) and
// creates a new control plane directory under os.TempDir() owned by this
// process, so that a later MakeDir of another process can tell whether it
// is still in use. The caller removes it when its control plane stops.
func MakeDir() (string, error) {
	if _, err := ReapOrphans(os.TempDir()); err != nil {
		return "", fmt.Errorf("reap orphaned control planes: %w", err)
	}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", fmt.Errorf("create control plane directory: %w", err)
	}
	if err := writeOwner(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("record the control plane's owner: %w", err)
	}
	return dir, nil
}

// writeOwner records this process as the owner of the control plane in dir.
func writeOwner(dir string) error {
	start, err := processStart(os.Getpid())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o600)
}

// ownerAlive reports whether the process that started the control plane in
// dir still runs. A directory without a readable owner file is taken as in
// use: it may be one whose Start has not written it yet.
func ownerAlive(dir string) bool {
	raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return true
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(raw), "%d %d", &pid, &start); err != nil {
		return true
	}
	now, err := processStart(pid)
	return err == nil && now == start
}

// ReapOrphans stops the etcd and kube-apiserver processes of control planes
// whose owner is gone (a test binary killed by a timeout or kill -9 leaves
// them running, a few hundred MiB each) and removes their directories under
// tmp. It returns the PIDs it killed. MakeDir calls it with os.TempDir().
func ReapOrphans(tmp string) ([]int, error) {
	dirs, err := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var orphaned []string
	for _, d := range dirs {
		if !ownerAlive(d) {
			orphaned = append(orphaned, d)
		}
	}
	if len(orphaned) == 0 {
		return nil, nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var killed []int
	var errs []error
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		// Arguments end with a space, so a directory matches only whole
		// (kerf-controlplane-1 is not in kerf-controlplane-12/etcd).
		args := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		for _, d := range orphaned {
			if strings.Contains(args, d+"/") || strings.Contains(args, d+" ") {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("kill orphaned control plane process %d: %w", pid, err))
				} else {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	for _, d := range orphaned {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}
