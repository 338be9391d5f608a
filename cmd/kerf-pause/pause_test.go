package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPauseBlocksUntilTerminatedThenExitsZero runs the real binary: it
// must still run after a while, and exit 0 on SIGTERM and on SIGINT.
func TestPauseBlocksUntilTerminatedThenExitsZero(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kerf-pause")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Fatalf("exited before a signal: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			require.NoError(t, cmd.Process.Signal(sig))
			select {
			case err := <-done:
				assert.NoError(t, err, "exit status 0")
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("did not exit on " + sig.String())
			}
		})
	}
	_ = os.Remove(bin)
}
