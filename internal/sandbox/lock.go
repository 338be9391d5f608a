package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// LockPath is the file Lock holds.
const LockPath = "/var/lock/kerf-sandbox.lock"

// Lock waits until no other process on the machine holds the sandbox lock
// and takes it. A sandbox's addresses, bridge and host paths are fixed, so
// only one can run at a time: test packages that bring one up (go test runs
// packages in parallel) hold the lock from Up to Down. The lock goes with
// the process, so a crashed holder never blocks the next one. unlock
// releases it.
func Lock(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(LockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("sandbox lock %s: %w", LockPath, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the sandbox lock %s (another test package or kerf-sandbox user holds it): %w", LockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
