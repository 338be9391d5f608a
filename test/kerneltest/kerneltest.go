// Package kerneltest holds helpers for tests on the real kernel: the cgroup
// v1 controller a test makes cgroups in (or a skip with the reason), and
// cgroups made and removed around a test. The cgroup package's own kernel
// tests use it from the external test package cgroup_test, since this
// package imports cgroup.
package kerneltest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cgroup"
)

// V1Controller returns this machine's hierarchy and the mount of the cgroup
// v1 controller, or skips the test: it needs root, readable cgroups and
// the controller on v1.
func V1Controller(tb testing.TB, controller string) (*cgroup.Hierarchy, cgroup.Mount) {
	tb.Helper()
	h, m := mounted(tb, controller)
	if m.Version != 1 {
		tb.Skipf("needs the cgroup v1 %s controller: this machine has it on cgroup v2 (mode %s)", controller, h.Mode)
	}
	return h, m
}

// Controller returns this machine's hierarchy and the mount that holds
// controller, on cgroup v1 or v2, or skips the test: it needs root and
// readable cgroups. On v2 it enables the controller for the root's
// children (cgroup.subtree_control), as a kubelet does for its pods, so
// the cgroups a test makes under the mount have its files. The host here
// has its controllers on v1; the VM of test/vmtest has them on v2.
func Controller(tb testing.TB, controller string) (*cgroup.Hierarchy, cgroup.Mount) {
	tb.Helper()
	h, m := mounted(tb, controller)
	if m.Version == 2 {
		WriteFile(tb, m.Path, "cgroup.subtree_control", "+"+controller)
	}
	return h, m
}

// mounted returns the hierarchy and the mount that holds controller, or
// skips the test saying why there is none.
func mounted(tb testing.TB, controller string) (*cgroup.Hierarchy, cgroup.Mount) {
	tb.Helper()
	if uid := os.Geteuid(); uid != 0 {
		tb.Skipf("needs root to create cgroups: running as uid %d", uid)
	}
	h, err := cgroup.Detect()
	if err != nil {
		tb.Skipf("cannot read this machine's cgroups: %v", err)
	}
	m, ok := h.Controller(controller)
	if !ok {
		tb.Skipf("the cgroup %s controller is on no hierarchy (cgroup mode %s)", controller, h.Mode)
	}
	return h, m
}

// SetCPUQuota gives the cgroup dir of m a CFS quota per period: the v1
// files cpu.cfs_quota_us and cpu.cfs_period_us, or v2's cpu.max.
func SetCPUQuota(tb testing.TB, m cgroup.Mount, dir string, quota, period time.Duration) {
	tb.Helper()
	if m.Version == 2 {
		WriteFile(tb, dir, "cpu.max", fmt.Sprintf("%d %d", quota.Microseconds(), period.Microseconds()))
		return
	}
	WriteFile(tb, dir, "cpu.cfs_period_us", strconv.FormatInt(period.Microseconds(), 10))
	WriteFile(tb, dir, "cpu.cfs_quota_us", strconv.FormatInt(quota.Microseconds(), 10))
}

// MakeCgroup creates a cgroup directory under parent and removes it when
// the test ends (RemoveCgroup).
func MakeCgroup(tb testing.TB, parent string) string {
	tb.Helper()
	dir := filepath.Join(parent, fmt.Sprintf("kerf-test-%d-%08x", os.Getpid(), rand.Uint32()))
	require.NoError(tb, os.Mkdir(dir, 0o755))
	tb.Cleanup(func() { RemoveCgroup(tb, dir) })
	return dir
}

// MakeCgroupPath creates the cgroup rel (a path such as
// /kubepods/burstable/pod<uid>/<id>) under the mount at mountPath, with the
// parents it lacks, and returns its directory. The test's cleanup removes
// the directories it made, children first; a parent that already existed,
// or that another call made, is left to whoever made it.
func MakeCgroupPath(tb testing.TB, mountPath, rel string) string {
	tb.Helper()
	dir := mountPath
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		dir = filepath.Join(dir, part)
		err := os.Mkdir(dir, 0o755)
		if os.IsExist(err) {
			continue
		}
		require.NoError(tb, err)
		d := dir
		tb.Cleanup(func() { RemoveCgroup(tb, d) })
	}
	return dir
}

// RemoveCgroup kills every process left in the cgroup at dir and removes
// it, retrying for up to 5 s while the kernel lets the processes go.
func RemoveCgroup(tb testing.TB, dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteFile writes value to the cgroup file name in dir.
func WriteFile(tb testing.TB, dir, name, value string) {
	tb.Helper()
	require.NoError(tb, os.WriteFile(filepath.Join(dir, name), []byte(value), 0), "write %s to %s", value, name)
}
