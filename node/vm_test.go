//go:build linux

package node_test

import (
	"testing"

	"github.com/kerf-dev/kerf/test/vmtest"
)

// TestKernelSamplerOnCgroupV2InAVM runs the agent's kernel tests
// (TestKernel*: the sampler's throttling counters, usage and removed
// cgroups, the OOM-kill count across agent restarts) again in a VM on
// Debian's 6.1 kernel with cgroup v2 (test/vmtest).
func TestKernelSamplerOnCgroupV2InAVM(t *testing.T) {
	vmtest.Run(t, "^TestKernel")
}
