package recommender

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Bounds of Config.Workers.
const (
	// DefaultWorkers is the recommendations written at once: as many as
	// the leader's reconcile workers, so one write's round trip no longer
	// sets the pace. The fenced client's rate limit is the real bound.
	DefaultWorkers = 8
	// MaxWorkers bounds Config.Workers.
	MaxWorkers = 64
)

// Results of kerf_recommender_recommendation_writes_total.
const (
	writeCreated = "created"
	writePatched = "patched"
	writeFailed  = "failed"
)

// recommendationWrite is one recommendation to write: a create when
// patch is nil, else a patch of obj.
type recommendationWrite struct {
	ref   workload.Ref
	tw    *trackedWorkload
	obj   *v1alpha1.RightsizingRecommendation
	patch client.Patch
	// refusals is the count the log gives.
	refusals int
}

// writeDone is a written recommendation's outcome, which the pass
// reads once every write has ended.
type writeDone struct {
	ref workload.Ref
	tw  *trackedWorkload
	err error
}

// writers writes one pass's recommendations on a fixed pool of
// goroutines (docs/recommender.md, "Writing at scale").
//   - The pass decides each recommendation on its own goroutine, as
//     before, and hands the write over; it waits while every worker is
//     busy, so at most twice the workers' writes are held at once.
//   - A failed write is logged and counted, and its workload's interval
//     does not start: the next pass tries it again.
type writers struct {
	client  client.Client
	log     *slog.Logger
	workers int
	writes  *prometheus.CounterVec
}

// newWriters returns the pool of workers writers, with its metric on reg.
func newWriters(c client.Client, workers int, reg prometheus.Registerer, log *slog.Logger) (*writers, error) {
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kerf_recommender_recommendation_writes_total",
		Help: "Recommendations the recommender wrote, by result (created, patched, failed: tried again on the next pass).",
	}, []string{"result"})
	if err := reg.Register(writes); err != nil {
		return nil, fmt.Errorf("register the recommender's write metric: %w", err)
	}
	for _, r := range []string{writeCreated, writePatched, writeFailed} {
		writes.WithLabelValues(r)
	}
	return &writers{client: c, log: log, workers: workers, writes: writes}, nil
}

// writeBatch is one pass's writes in flight.
type writeBatch struct {
	w    *writers
	jobs chan *recommendationWrite
	wg   sync.WaitGroup

	// done holds a small outcome per write: at most one per tracked
	// workload, which MaxContainers bounds.
	mu   sync.Mutex
	done []writeDone
}

// start starts one pass's workers; they stop when wait is called.
func (w *writers) start(ctx context.Context) *writeBatch {
	b := &writeBatch{w: w, jobs: make(chan *recommendationWrite, w.workers)}
	b.wg.Add(w.workers)
	for range w.workers {
		go func() {
			defer b.wg.Done()
			for job := range b.jobs {
				err := w.write(ctx, job)
				b.mu.Lock()
				b.done = append(b.done, writeDone{ref: job.ref, tw: job.tw, err: err})
				b.mu.Unlock()
			}
		}()
	}
	return b
}

// add hands a write to the workers, waiting while they are all busy
// and their queue is full.
func (b *writeBatch) add(job *recommendationWrite) { b.jobs <- job }

// wait waits for every write added and returns their outcomes.
func (b *writeBatch) wait() []writeDone {
	close(b.jobs)
	b.wg.Wait()
	return b.done
}

// write sends one recommendation's create or patch.
func (w *writers) write(ctx context.Context, job *recommendationWrite) error {
	ns, name := job.obj.Namespace, job.obj.Name
	if job.patch == nil {
		if err := w.client.Create(ctx, job.obj); err != nil {
			w.writes.WithLabelValues(writeFailed).Inc()
			return fmt.Errorf("create recommendation %s/%s: %w", ns, name, err)
		}
		w.writes.WithLabelValues(writeCreated).Inc()
		w.log.Info("recommendation made", "namespace", ns, "name", name, "refusals", job.refusals)
		return nil
	}
	if err := w.client.Patch(ctx, job.obj, job.patch); err != nil {
		w.writes.WithLabelValues(writeFailed).Inc()
		return fmt.Errorf("update recommendation %s/%s: %w", ns, name, err)
	}
	w.writes.WithLabelValues(writePatched).Inc()
	w.log.Info("recommendation updated", "namespace", ns, "name", name, "refusals", job.refusals)
	return nil
}
