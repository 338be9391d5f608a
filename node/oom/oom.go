// Package oom catches OOM kills on a node and resolves each to the container
// whose cgroup it happened in. Three sources, best first (docs/design.md
// section 5): the BPF tracer on oom/mark_victim, the cgroup files that count
// kills (memory.events on v2, memory.oom_control on v1), and the kernel log
// (/dev/kmsg, read with the package's own parser of the OOM report). Open
// picks the best one the node allows and says why the others were not
// taken; Counts reconciles what the source saw with the cgroup files, so a
// dropped event is never a missed kill.
package oom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/kerf-dev/kerf/cgroup"
)

// Kill is one OOM kill, or several in one cgroup when a source can only see
// a count (the cgroup-file source).
type Kill struct {
	// Source names the source that saw it: "bpf", "cgroup" or "kmsg".
	Source string
	// Time is when the kernel killed, as precisely as the source knows: the
	// BPF hook's own clock, the kernel log's timestamp, or when the cgroup
	// file was seen to change.
	Time time.Time
	// KernelNS is the kernel's CLOCK_MONOTONIC time of the kill in
	// nanoseconds, or 0 where the source does not have it.
	KernelNS uint64
	// PID is the victim's process id, 0 where the source does not have it.
	PID int
	// Comm is the victim's command name, "" where unknown.
	Comm string
	// Cgroup is the victim's memory cgroup path within its hierarchy, e.g.
	// /kubepods/burstable/pod<uid>/<id>, "" where unknown.
	Cgroup string
	// CgroupID is the id (directory inode) of that cgroup, 0 where unknown.
	CgroupID uint64
	// PodUID and ContainerID name the container the cgroup belongs to; both
	// are empty when the cgroup is not a pod container's.
	PodUID, ContainerID string
	// Count is how many kills this report stands for, at least 1.
	Count uint64
}

// Source delivers OOM kills.
type Source interface {
	// Name returns the source's name: "bpf", "cgroup" or "kmsg".
	Name() string
	// Detail says how the source works here, e.g. which BPF hook is attached.
	Detail() string
	// Run delivers kills to emit until ctx is done or the source fails. It is
	// called once; kills from before Run was called are not delivered.
	Run(ctx context.Context, emit func(Kill)) error
	// Close releases the source's resources; call it after Run returned.
	Close() error
}

// Kinds of source, in the order "auto" tries them.
const (
	KindAuto   = "auto"
	KindBPF    = "bpf"
	KindCgroup = "cgroup"
	KindKmsg   = "kmsg"
	// KindOff reports no kill at all: the leader then sees OOM kills only
	// in pod status, the kubelet's path (a baseline for benchmarks, or a
	// choice where the agent must not read the kernel's OOM events).
	KindOff = "off"
)

// Kinds lists the valid values of --oom-source.
var Kinds = []string{KindAuto, KindBPF, KindCgroup, KindKmsg, KindOff}

// Options configure the sources.
type Options struct {
	// Hierarchy is the node's cgroup setup; nil means cgroup.Detect().
	Hierarchy *cgroup.Hierarchy
	// Root is the cgroup path whose subtree is watched: the cgroup-file
	// source reads every cgroup below it, the BPF source indexes their ids.
	// Empty means "/kubepods" (or "/kubepods.slice" where that exists).
	Root string
	// Interval is how often the cgroup-file source rescans its subtree and
	// re-reads every counter, the last resort when no notification
	// arrives, and how often the BPF source walks its subtree for the ids
	// of new cgroups. Zero means one second.
	Interval time.Duration
	// BPFHook forces one BPF hook ("tp_btf/mark_victim" or
	// "tracepoint/oom/mark_victim"); empty tries them best first.
	BPFHook string
}

func (o *Options) defaults() error {
	if o.Hierarchy == nil {
		h, err := cgroup.Detect()
		if err != nil {
			return fmt.Errorf("detect cgroups: %w", err)
		}
		o.Hierarchy = h
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Root == "" {
		o.Root = "/kubepods"
		if m, ok := o.Hierarchy.Controller("memory"); ok {
			if dir, err := m.Join("/kubepods.slice"); err == nil && isDir(dir) {
				o.Root = "/kubepods.slice"
			}
		}
	}
	if !strings.HasPrefix(o.Root, "/") {
		return fmt.Errorf("oom source root %q: must be an absolute cgroup path", o.Root)
	}
	o.Root = path.Clean(o.Root)
	return nil
}

// Open opens the source of the given kind. With "auto" it tries bpf, cgroup
// and kmsg in that order and returns the first that opens, with the reasons
// the better ones could not (nil when the best one opened).
func Open(kind string, opts Options) (Source, []error, error) {
	if err := opts.defaults(); err != nil {
		return nil, nil, err
	}
	switch kind {
	case KindBPF:
		s, err := openBPF(opts)
		return s, nil, err
	case KindCgroup:
		s, err := openFiles(opts)
		return s, nil, err
	case KindKmsg:
		s, err := openKmsg(opts)
		return s, nil, err
	case KindOff:
		return offSource{}, nil, nil
	case KindAuto, "":
		var skipped []error
		for _, k := range []string{KindBPF, KindCgroup, KindKmsg} {
			s, _, err := Open(k, opts)
			if err == nil {
				return s, skipped, nil
			}
			skipped = append(skipped, fmt.Errorf("%s: %w", k, err))
		}
		return nil, skipped, fmt.Errorf("no OOM source can run here: %w", errors.Join(skipped...))
	}
	return nil, nil, fmt.Errorf("oom-source %q: must be one of %s", kind, strings.Join(Kinds, ", "))
}

// resolve fills PodUID and ContainerID from the kill's cgroup path.
func resolve(k *Kill) {
	if k.Cgroup == "" {
		return
	}
	if uid, id, ok := cgroup.ParseContainerPath(k.Cgroup); ok {
		k.PodUID, k.ContainerID = uid, id
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// offSource is --oom-source=off: it delivers nothing.
type offSource struct{}

func (offSource) Name() string   { return KindOff }
func (offSource) Detail() string { return "no OOM source: kills are seen in pod status only" }
func (offSource) Close() error   { return nil }

func (offSource) Run(ctx context.Context, _ func(Kill)) error {
	<-ctx.Done()
	return nil
}
