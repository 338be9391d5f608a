package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kerf-dev/kerf/bpf"
)

// KillLog keeps the OOM kills a BPF tracer on this machine reports, by
// memory cgroup id, with the kernel's own timestamps: the scenarios'
// "kernel" timeline marks and the benchmark's clock start.
type KillLog struct {
	tracer *bpf.OOMTracer
	mu     sync.Mutex
	byID   map[uint64]bpf.OOMEvent
	notify chan struct{}
}

// NewKillLog loads the OOM tracer (root, BTF and a kernel that lets
// tracepoints attach) and starts reading it.
func NewKillLog() (*KillLog, error) {
	t, err := bpf.NewOOMTracer(bpf.OOMTracerOptions{})
	if err != nil {
		return nil, err
	}
	k := &KillLog{tracer: t, byID: map[uint64]bpf.OOMEvent{}, notify: make(chan struct{}, 1)}
	go func() {
		var ev bpf.OOMEvent
		for t.ReadEvent(&ev) == nil {
			k.mu.Lock()
			if _, seen := k.byID[ev.MemcgID]; !seen {
				k.byID[ev.MemcgID] = ev
			}
			k.mu.Unlock()
			select {
			case k.notify <- struct{}{}:
			default:
			}
		}
	}()
	return k, nil
}

// Close stops the tracer.
func (k *KillLog) Close() error { return k.tracer.Close() }

// Wait returns the first kill in the memory cgroup memcg (the inode of its
// directory under the v1 memory mount).
func (k *KillLog) Wait(ctx context.Context, memcg uint64) (bpf.OOMEvent, error) {
	for {
		k.mu.Lock()
		ev, ok := k.byID[memcg]
		k.mu.Unlock()
		if ok {
			return ev, nil
		}
		select {
		case <-k.notify:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ev, fmt.Errorf("no OOM kill in memory cgroup %d: %w", memcg, ctx.Err())
		}
	}
}
