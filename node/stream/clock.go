package stream

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// kernelClock turns the wall times of samples into CLOCK_MONOTONIC
// nanoseconds, the clock of the protocol's kernel_ns fields, through Go's
// monotonic reading of a time taken at start.
type kernelClock struct {
	at   time.Time
	mono uint64
}

func newKernelClock() (kernelClock, error) {
	var ts unix.Timespec
	at := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return kernelClock{}, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	return kernelClock{at: at, mono: uint64(ts.Nano())}, nil
}

// ns returns t on CLOCK_MONOTONIC, never less than 1.
func (k kernelClock) ns(t time.Time) uint64 {
	d := t.Sub(k.at)
	if d < 0 && uint64(-d) >= k.mono {
		return 1
	}
	return uint64(int64(k.mono) + int64(d))
}

// unixNs returns t in Unix nanoseconds, 0 for the zero time.
func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
