package vmtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Only a soft lockup's panic before the tests ended, and before any of
// them failed, boots the VM again: another panic, or a failure, is the
// tests'.
func TestOnlyALockupBeforeAFailureBootsTheVMAgain(t *testing.T) {
	lockup := "=== RUN   TestA\n[ 44.1] Kernel panic - not syncing: softlockup: hung tasks\n"
	assert.True(t, bootAgain("", []byte(lockup)))
	assert.False(t, bootAgain("", []byte("--- FAIL: TestA (0.1s)\n"+lockup)), "a test failed before the lockup")
	assert.False(t, bootAgain("", []byte("[ 3.0] Kernel panic - not syncing: Oops: Fatal exception\n")), "another panic")
	assert.False(t, bootAgain("0", []byte(lockup)), "the tests ended")
	assert.False(t, bootAgain("", []byte("=== RUN   TestA\n")), "no panic: QEMU ended otherwise")
}
