package scenario

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A kill line the console had before the log was followed is not
// reported; one appended after, with firmware escapes and a carriage
// return around it as QEMU's serial port writes them, is, by its process
// name.
func TestConsoleKillsReportsKillsAppendedAfterItStarted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.log")
	old := "[    4.2] Memory cgroup out of memory: Killed process 99 (kerf-workload) total-vm:1kB\n"
	require.NoError(t, os.WriteFile(path, []byte(old), 0o644))
	k, err := NewConsoleKills(path)
	require.NoError(t, err)
	defer k.Close()

	since := time.Now()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\x1b[?7l[   12.5] Memory cgroup out of memory: Killed process 131 (pause) total-vm:1kB\r\n" +
		"[   12.6] Memory cgroup out of memory: Killed process 132 (kerf-workload) total-vm:1kB, anon-rss:98304kB\r\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kill, err := k.Wait(ctx, since, "kerf-workload")
	require.NoError(t, err)
	require.Equal(t, 132, kill.PID)
	require.True(t, kill.Seen.After(since))

	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = k.Wait(short, kill.Seen, "kerf-workload")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the kill before the start and the one already returned are not new")
}
