package forward

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ReleaseConfig configures a Releaser.
type ReleaseConfig struct {
	// Namespace holds CursorConfigMap (the leader's namespace), read to
	// count what the hub never acknowledged.
	Namespace string
	// Interval is how often the recommendations are looked at again for a
	// finalizer (one added by a leader that still had a hub); zero means
	// 30 s.
	Interval time.Duration
	// PerSecond bounds the finalizer patches per second (burst the same);
	// zero means 20.
	PerSecond float64
	// Registerer receives the kerf_hub_* metrics (dropped counts what was
	// let go undelivered); nil registers none.
	Registerer prometheus.Registerer
	// Log receives what was released; nil means slog.Default().
	Log *slog.Logger
	// Recommendations, when set, gives each pass the recommendations
	// (Config.Recommendations).
	Recommendations Recommendations
}

// Releaser is what a leader runs instead of the Forwarder when no hub is
// configured. It removes the kerf.dev/hub-delivery finalizer from every
// recommendation. So turning the hub off does not leave deleted
// recommendations waiting for a delivery that will not come.
//
// A deleted recommendation it lets go loses its undelivered actions. They
// are counted in kerf_hub_dropped_total{reason="disabled"} and logged
// with the count. A live recommendation's undelivered actions stay in its
// history, and its cursor in CursorConfigMap. So a leader given the hub
// again delivers them, as far as the 100-entry history still holds them;
// kerf_hub_undelivered says how many there are. Like the Forwarder, only
// the elected leader runs it.
type Releaser struct {
	f        *Forwarder
	interval time.Duration
	limiter  *rate.Limiter
	passes   int
}

// NewReleaser returns a Releaser for cfg. c is the manager's client (cached
// reads, the finalizer patches); api reads CursorConfigMap.
func NewReleaser(cfg ReleaseConfig, c client.Client, api client.Reader) *Releaser {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.PerSecond <= 0 {
		cfg.PerSecond = 20
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	f := &Forwarder{cfg: Config{Namespace: cfg.Namespace, Now: time.Now, Recommendations: cfg.Recommendations}, client: c, api: api, metrics: newMetrics(cfg.Registerer), log: log}
	return &Releaser{f: f, interval: cfg.Interval, limiter: rate.NewLimiter(rate.Limit(cfg.PerSecond), max(1, int(cfg.PerSecond)))}
}

// NeedLeaderElection makes the manager run the Releaser only on the
// elected leader.
func (r *Releaser) NeedLeaderElection() bool { return true }

// Start releases at once and then every Interval until ctx is done.
// Failures are logged and retried at the next pass; Start returns nil when
// ctx ends.
func (r *Releaser) Start(ctx context.Context) error {
	for {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.f.log.Warn("remove the hub-delivery finalizers; retrying", "retryIn", r.interval.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.interval):
		}
	}
}

// Released is what one Releaser pass did.
type Released struct {
	// Recommendations is how many had their finalizer removed.
	Recommendations int
	// Dropped is how many undelivered actions of deleted recommendations
	// were let go with them.
	Dropped int64
	// Undelivered is how many actions of the live recommendations the hub
	// has not acknowledged (kept in their histories).
	Undelivered int64
}

// Pass removes the finalizer from every recommendation that has it, at
// most PerSecond patches a second, and counts what the hub never got. The
// first pass logs what it found even when it is nothing.
func (r *Releaser) Pass(ctx context.Context) (Released, error) {
	var out Released
	if err := r.f.loadCursors(ctx); err != nil {
		return out, err
	}
	// The cache's own objects, only read (as Forwarder.Pass reads them).
	rsrs, err := r.f.recommendations(ctx)
	if err != nil {
		return out, err
	}
	var firstErr error
	failed := 0
	for _, rsr := range rsrs {
		n := undeliveredCount(rsr, r.f.cursors[rsr.UID])
		if rsr.DeletionTimestamp == nil {
			out.Undelivered += n
		}
		if !controllerutil.ContainsFinalizer(rsr, Finalizer) {
			continue
		}
		if err := r.limiter.Wait(ctx); err != nil {
			return out, fmt.Errorf("wait to patch %s/%s: %w", rsr.Namespace, rsr.Name, err)
		}
		if err := r.f.removeFinalizer(ctx, rsr); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out.Recommendations++
		if rsr.DeletionTimestamp != nil && n > 0 {
			out.Dropped += n
			r.f.metrics.dropped.WithLabelValues("disabled").Add(float64(n))
		}
	}
	r.f.metrics.undelivered.Set(float64(out.Undelivered))
	r.passes++
	if r.passes == 1 || out.Recommendations > 0 || out.Dropped > 0 {
		r.f.log.Info("no hub configured: removed the hub-delivery finalizer", "recommendations", out.Recommendations,
			"droppedActions", out.Dropped, "undeliveredKept", out.Undelivered, "finalizer", Finalizer)
	}
	if out.Dropped > 0 {
		r.f.log.Error("no hub configured: deleted recommendations were let go with actions the hub never had; dropped", "actions", out.Dropped)
	}
	if firstErr != nil {
		return out, fmt.Errorf("%d of the finalizer patches failed: %w", failed, firstErr)
	}
	return out, nil
}

// undeliveredCount is how many of the recommendation's history entries
// come after its cursor.
func undeliveredCount(rsr *v1alpha1.RightsizingRecommendation, cursor int64) int64 {
	var n int64
	for i := range rsr.Status.History {
		if SeqOf(rsr.Status.History, i) > cursor {
			n++
		}
	}
	return n
}
