//go:build linux

package oom_test

import (
	"testing"

	"github.com/kerf-dev/kerf/test/vmtest"
)

// TestOOMSourcesOnCgroupV2InAVM runs the OOM sources' kernel tests again
// in a VM on Debian's 6.1 kernel with cgroup v2 (test/vmtest): every
// source (BPF on both hooks, the cgroup files, /dev/kmsg) reports one real
// kill in a v2 cgroup shaped like a pod container's, and a BPF kill read
// after its cgroup was removed still names its container.
func TestOOMSourcesOnCgroupV2InAVM(t *testing.T) {
	vmtest.Run(t, "^(TestEachSourceReportsOneRealOOMKill|TestKillsBeforeTheSourceStartedAreNotDelivered|TestKmsgKillOfAProcessThatNamedItselfStaysInItsCgroup|TestABPFKillReadAfterItsCgroupWentNamesItsContainer)$")
}
