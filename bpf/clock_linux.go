package bpf

import "golang.org/x/sys/unix"

// MonotonicNow returns the current CLOCK_MONOTONIC time in nanoseconds, the
// clock of OOMEvent.KtimeNS.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC is always available; clock_gettime cannot fail here.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
