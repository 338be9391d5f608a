//go:build !linux

package bpf

import "time"

var processStart = time.Now()

// MonotonicNow returns nanoseconds on a monotonic clock. Only on Linux is it
// CLOCK_MONOTONIC, the clock of OOMEvent.KtimeNS; elsewhere it counts from
// process start, since no kernel events exist to compare it with.
func MonotonicNow() uint64 {
	return uint64(time.Since(processStart))
}
