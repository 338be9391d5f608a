package oom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

// kmsgSource reads kills from the kernel log, /dev/kmsg, with its own
// parser of the kernel's OOM report (oomReport): only the kernel's records
// count, and each line is matched from its start, so the command name a
// process gives itself cannot forge a kill or move one to another cgroup.
// Run starts reading after the log's newest record (a seek to its end), so
// no kill logged before it is delivered. The kernel
// rate-limits its OOM report (10 per 5 s), so under a storm this source
// misses kills; Counts makes up for them from the cgroup files.
type kmsgSource struct {
	f      *os.File
	memory cgroup.Mount
}

// kmsgReadBytes holds any record: the kernel writes at most 8 KiB of text
// per record (CONSOLE_EXT_LOG_MAX).
const kmsgReadBytes = 8192

func openKmsg(opts Options) (Source, error) {
	// Non-blocking, so that a read waits in the runtime's poller and
	// Close ends it.
	f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	memory, _ := opts.Hierarchy.Controller("memory")
	return &kmsgSource{f: f, memory: memory}, nil
}

func (s *kmsgSource) Name() string   { return KindKmsg }
func (s *kmsgSource) Detail() string { return "/dev/kmsg" }

func (s *kmsgSource) Run(ctx context.Context, emit func(Kill)) error {
	// The log replays from its oldest record. Its timestamps cannot tell
	// which records came before Run: they count on the scheduler's clock,
	// which runs apart from CLOCK_MONOTONIC (2.6 s apart in a VM under
	// TCG, where a kill from before was delivered). The seek can.
	if _, err := s.f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("seek to the end of the kernel log: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.f.Close() })
	defer stop()
	buf := make([]byte, kmsgReadBytes)
	var report oomReport
	for {
		n, err := s.f.Read(buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			continue // records were overwritten before this read: go on with the next
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("read kernel log: %w", err)
		}
		rec, err := parseKmsgRecord(buf[:n])
		if err != nil {
			continue
		}
		k, ok := report.line(rec)
		if !ok {
			continue
		}
		k.Time = kmsgTime(k.KernelNS)
		if k.Cgroup != "" && s.memory.Path != "" {
			if dir, err := s.memory.Join(k.Cgroup); err == nil {
				k.CgroupID, _ = cgroup.CgroupID(dir)
			}
		}
		resolve(&k)
		emit(k)
	}
}

// kmsgTime dates a record of the kernel log. Its clock may run ahead of
// CLOCK_MONOTONIC, and a kill dated after it was read would count against
// a change made after it: the date is never later than now.
func kmsgTime(kernelNS uint64) time.Time {
	now := time.Now()
	if t := bpf.MonotonicToTime(kernelNS); t.Before(now) {
		return t
	}
	return now
}

func (s *kmsgSource) Close() error { return s.f.Close() }
