package oom

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/cadvisor/utils/oomparser"
	"golang.org/x/sys/unix"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

// kmsgSource reads kills from the kernel log through cadvisor's oomparser.
// The parser replays the log from boot and cannot be told to skip it, so
// the source drops every kill logged before Run started, comparing kernel
// timestamps. The kernel rate-limits its OOM report (10 per 5 s), so under
// a storm this source misses kills; Counts makes up for them from the
// cgroup files.
type kmsgSource struct {
	parser *oomparser.OomParser
	// boot is the wall-clock boot time the parser adds kernel timestamps
	// to, so a kill's TimeOfDeath minus boot is its kernel timestamp.
	boot   time.Time
	memory cgroup.Mount
	start  time.Duration
}

func openKmsg(opts Options) (Source, error) {
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		return nil, fmt.Errorf("kernel log: %w", err)
	}
	memory, _ := opts.Hierarchy.Controller("memory")
	// The parser takes the boot time as now minus sysinfo's uptime, which
	// the kernel rounds up to the next second. Take the same reading
	// around it, away from a second boundary, to know its boot time to the
	// microsecond.
	boottime := func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
		return time.Duration(ts.Nano())
	}
	if frac := boottime() % time.Second; frac > 980*time.Millisecond {
		time.Sleep(time.Second - frac + time.Millisecond)
	}
	before, b := time.Now(), boottime()
	parser, err := oomparser.New()
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	after := time.Now()
	up := b.Truncate(time.Second)
	if up < b {
		up += time.Second
	}
	boot := before.Add(after.Sub(before) / 2).Add(-up)
	return &kmsgSource{parser: parser, boot: boot, memory: memory}, nil
}

func (s *kmsgSource) Name() string   { return KindKmsg }
func (s *kmsgSource) Detail() string { return "/dev/kmsg (cadvisor oomparser)" }

func (s *kmsgSource) Run(ctx context.Context, emit func(Kill)) error {
	s.start = time.Duration(bpf.MonotonicNow())
	ch := make(chan *oomparser.OomInstance, 64)
	// StreamOoms cannot be stopped; after Run returns it blocks on the full
	// channel until the process exits.
	go s.parser.StreamOoms(ch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case in := <-ch:
			at := in.TimeOfDeath.Sub(s.boot)
			if at < s.start {
				continue // replayed from before the source started
			}
			k := Kill{
				Source:   KindKmsg,
				Time:     bpf.MonotonicToTime(uint64(at)),
				KernelNS: uint64(at),
				PID:      in.Pid,
				Comm:     in.ProcessName,
				Count:    1,
			}
			if in.ContainerName != "" && in.ContainerName != "/" {
				k.Cgroup = in.ContainerName
				if s.memory.Path != "" {
					if dir, err := s.memory.Join(k.Cgroup); err == nil {
						k.CgroupID, _ = cgroup.CgroupID(dir)
					}
				}
			}
			resolve(&k)
			emit(k)
		}
	}
}

func (s *kmsgSource) Close() error { return nil }
