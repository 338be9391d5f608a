//go:build linux

package bpf_test

import (
	"testing"

	"github.com/kerf-dev/kerf/test/vmtest"
)

// TestOOMTracerOnCgroupV2InAVM runs the tracer's kernel tests again in a
// VM on Debian's 6.1 kernel with cgroup v2 and no lockdown
// (test/vmtest): both hooks, a victim that ran the OOM killer itself and
// one killed for another process's allocation, with v2 cgroup ids.
func TestOOMTracerOnCgroupV2InAVM(t *testing.T) {
	vmtest.Run(t, "^(TestOOMTracer|TestNewOOMTracer)")
}
