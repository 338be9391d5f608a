//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import (
	"fmt"
	"time"
)

// OOMTracer reports OOM-killer victims. On this platform it cannot be
// started: NewOOMTracer returns an error wrapping ErrNotSupported.
type OOMTracer struct {
	hook Hook
}

// NewOOMTracer returns an error wrapping ErrNotSupported: the BPF object is
// only built for little-endian Linux.
func NewOOMTracer(opts OOMTracerOptions) (*OOMTracer, error) {
	return nil, fmt.Errorf("start OOM tracer: %w", ErrNotSupported)
}

// Hook returns the hook the tracer is attached to.
func (t *OOMTracer) Hook() Hook {
	return t.hook
}

// ReadEvent returns an error wrapping ErrNotSupported.
func (t *OOMTracer) ReadEvent(ev *OOMEvent) error {
	return fmt.Errorf("read OOM event: %w", ErrNotSupported)
}

// SetDeadline does nothing on this platform.
func (t *OOMTracer) SetDeadline(deadline time.Time) {}

// Dropped returns an error wrapping ErrNotSupported.
func (t *OOMTracer) Dropped() (uint64, error) {
	return 0, fmt.Errorf("read OOM tracer drop count: %w", ErrNotSupported)
}

// Close does nothing on this platform.
func (t *OOMTracer) Close() error {
	return nil
}
