// Package cgrouptest finds, for tests on the real kernel, the cgroup v1
// controllers they make cgroups in, or skips the test with the reason. The
// cgroup package's own tests keep their copy: they cannot import a package
// that imports cgroup.
package cgrouptest

import (
	"os"
	"testing"

	"github.com/kerf-dev/kerf/cgroup"
)

// V1Controller returns this machine's hierarchy and the mount of the cgroup
// v1 controller, or skips the test: it needs root, readable cgroups and
// the controller on v1.
func V1Controller(tb testing.TB, controller string) (*cgroup.Hierarchy, cgroup.Mount) {
	tb.Helper()
	if uid := os.Geteuid(); uid != 0 {
		tb.Skipf("needs root to create cgroups: running as uid %d", uid)
	}
	h, err := cgroup.Detect()
	if err != nil {
		tb.Skipf("cannot read this machine's cgroups: %v", err)
	}
	m, ok := h.Controller(controller)
	if !ok || m.Version != 1 {
		tb.Skipf("needs the cgroup v1 %s controller (cgroup mode %s)", controller, h.Mode)
	}
	return h, m
}
