package kube

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReapOrphansStopsOnlyTheProcessesOfADeadOwner makes two control plane
// directories, one whose owner is this test and one whose owner is gone (a
// PID that now names another process), each with a long-running process
// that names it, as etcd and kube-apiserver do. Reaping kills the orphan's
// process and removes its directory, and leaves the other alone.
func TestReapOrphansStopsOnlyTheProcessesOfADeadOwner(t *testing.T) {
	tmp := t.TempDir()
	start, err := processStart(os.Getpid())
	require.NoError(t, err)
	plane := func(name string, ownerStart uint64) (string, *exec.Cmd) {
		dir := filepath.Join(tmp, dirPrefix+name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "etcd"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), ownerStart), 0o600))
		log := filepath.Join(dir, "etcd", "log")
		require.NoError(t, os.WriteFile(log, nil, 0o600))
		cmd := exec.Command("tail", "-f", log)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return dir, cmd
	}
	live, liveProc := plane("live", start)
	// The same PID started at another time: the owner died and its PID
	// was reused.
	orphan, orphanProc := plane("live-not", start+1)

	killed, err := ReapOrphans(tmp)
	require.NoError(t, err)
	assert.Equal(t, []int{orphanProc.Process.Pid}, killed)
	err = orphanProc.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	_, err = os.Stat(orphan)
	assert.True(t, os.IsNotExist(err), "the orphan's directory is removed")

	_, err = os.Stat(live)
	assert.NoError(t, err, "a control plane in use keeps its directory")
	assert.NoError(t, liveProc.Process.Signal(syscall.Signal(0)), "and its processes")
}
