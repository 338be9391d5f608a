package oom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

// kmsgSource reads kills from the kernel log, /dev/kmsg, with its own
// parser of the kernel's OOM report (oomReport): only the kernel's records
// count, and each line is matched from its start, so the command name a
// process gives itself cannot forge a kill or move one to another cgroup.
// The log is replayed from its oldest record; the source drops every kill
// logged before Run started, comparing kernel timestamps. The kernel
// rate-limits its OOM report (10 per 5 s), so under a storm this source
// misses kills; Counts makes up for them from the cgroup files.
type kmsgSource struct {
	f      *os.File
	memory cgroup.Mount
	start  uint64
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
	s.start = bpf.MonotonicNow()
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
		if !ok || k.KernelNS < s.start {
			continue // no kill yet, or replayed from before the source started
		}
		k.Time = bpf.MonotonicToTime(k.KernelNS)
		if k.Cgroup != "" && s.memory.Path != "" {
			if dir, err := s.memory.Join(k.Cgroup); err == nil {
				k.CgroupID, _ = cgroup.CgroupID(dir)
			}
		}
		resolve(&k)
		emit(k)
	}
}

func (s *kmsgSource) Close() error { return s.f.Close() }
