package cgroup_test

import (
	"testing"

	"github.com/kerf-dev/kerf/test/vmtest"
)

// TestKernelTestsOnCgroupV2InAVM runs this package's kernel tests
// (TestKernel*) again in a VM on Debian's 6.1 kernel with cgroup v2
// (test/vmtest): the readers, the throttling counters and the OOM-kill
// count on a real v2 hierarchy. A test that reads only one version skips
// on the other and says why.
func TestKernelTestsOnCgroupV2InAVM(t *testing.T) {
	vmtest.Run(t, "^TestKernel")
}
