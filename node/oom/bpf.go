package oom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kerf-dev/kerf/bpf"
	"github.com/kerf-dev/kerf/cgroup"
)

// bpfSource reads kills from the BPF tracer and finds each victim's cgroup
// by id in the memory hierarchy (v1) or the unified one (v2).
type bpfSource struct {
	tracer *bpf.OOMTracer
	memory cgroup.Mount
	ids    *cgroup.IDIndex
	// unified is set when ids indexes the v2 tree: then the event's
	// CgroupID, not its MemcgID, names the victim's own cgroup.
	unified bool
	// hostPIDs is set when the agent sees the host's pids (hostPID): only
	// then does the tracer's /proc reading describe the victim.
	hostPIDs bool
	// stopWalks ends the walks that keep ids current (walk).
	stopWalks context.CancelFunc
}

func openBPF(opts Options) (Source, error) {
	memory, ok := opts.Hierarchy.Controller("memory")
	if !ok {
		return nil, errors.New("the memory cgroup controller is not mounted")
	}
	dir, err := memory.Join(opts.Root)
	if err != nil {
		return nil, err
	}
	ids, err := cgroup.NewIDIndex(dir)
	if err != nil && !errors.Is(err, cgroup.ErrGone) {
		return nil, fmt.Errorf("index cgroups under %s: %w", dir, err)
	}
	if ids == nil {
		// The subtree does not exist yet (no pods): index the whole
		// hierarchy; lookups rescan on a miss.
		if ids, err = cgroup.NewIDIndex(memory.Path); err != nil {
			return nil, fmt.Errorf("index cgroups under %s: %w", memory.Path, err)
		}
	}
	tracer, err := bpf.NewOOMTracer(bpf.OOMTracerOptions{Hook: bpf.Hook(opts.BPFHook)})
	if err != nil {
		return nil, explainRefusal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &bpfSource{tracer: tracer, memory: memory, ids: ids, unified: memory.Version == 2,
		hostPIDs: inHostPIDNamespace(), stopWalks: stop}
	go s.walk(ctx, opts.Interval)
	return s, nil
}

// walk walks the indexed subtree every interval until ctx ends, so that
// ids knows every container's cgroup while it exists. A kill's cgroup can
// be gone by the time its event is read: the container restarted, and
// the agent, starved on a busy node, read late. The index still names a
// cgroup some walk found (cgroup.IDRetention); a lookup's own walk, on a
// miss, comes too late for one created and removed since the last.
func (s *bpfSource) walk(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.ids.Refresh() // a subtree gone is a miss for the lookups, as before
		}
	}
}

func (s *bpfSource) Name() string   { return KindBPF }
func (s *bpfSource) Detail() string { return string(s.tracer.Hook()) }

func (s *bpfSource) Run(ctx context.Context, emit func(Kill)) error {
	stop := context.AfterFunc(ctx, func() { _ = s.tracer.Close() })
	defer stop()
	var ev bpf.OOMEvent
	for {
		if err := s.tracer.ReadEvent(&ev); err != nil {
			if errors.Is(err, os.ErrClosed) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		emit(s.kill(&ev))
	}
}

// kill turns ev into a Kill with the victim's cgroup. Outside the host's
// pid namespace the tracer's /proc reading of a victim the BPF program
// could not read described another process (or none), so such a kill
// keeps the tracepoint's pid alone; the cgroup's counter still counts it
// (Counts).
func (s *bpfSource) kill(ev *bpf.OOMEvent) Kill {
	k := Kill{Source: KindBPF, Time: ev.Time(), KernelNS: ev.KtimeNS, PID: int(ev.PID), Count: 1}
	if ev.Resolution != bpf.ResolvedInKernel && !s.hostPIDs {
		return k
	}
	k.Comm, k.CgroupID = ev.Comm, ev.MemcgID
	if ev.TGID != 0 {
		k.PID = int(ev.TGID)
	}
	if s.unified {
		k.CgroupID = ev.CgroupID
	}
	if dir, ok := s.ids.Lookup(k.CgroupID); ok {
		if p, err := s.memory.Rel(dir); err == nil {
			k.Cgroup = p
		}
	}
	resolve(&k)
	return k
}

func (s *bpfSource) Close() error {
	if s.stopWalks != nil {
		s.stopWalks()
	}
	return s.tracer.Close()
}

// Dropped returns how many events the BPF program could not reserve room
// for in its ring buffer (bpf.OOMTracer.Dropped): the agent exports it as
// kerf_agent_oom_ringbuf_dropped_total.
func (s *bpfSource) Dropped() (uint64, error) { return s.tracer.Dropped() }
