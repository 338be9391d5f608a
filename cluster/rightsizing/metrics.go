package rightsizing

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Metrics are the leader's own metrics (docs/design.md section 7).
type Metrics struct {
	// Actions counts kerf_actions_total{type,reason,resource}: one per
	// resource an action touched (applied, rolled_back, failed, healthy,
	// blocked).
	Actions *prometheus.CounterVec
	// InvalidStatus counts kerf_status_writes_invalid_total{outcome}: status
	// writes the apiserver refused as invalid (422), by what followed:
	// "fallback" when the write without the outcome's messages succeeded,
	// "refused" when it was refused too (the write is then retried).
	InvalidStatus *prometheus.CounterVec
	// HarmQueueWait is kerf_leader_harm_queue_wait_seconds: how long a
	// harm signal's request waited from its enqueue to the start of its
	// recommendation's next pass. A harm signal is an OOM kill, a
	// container restart or termination. The wait includes the lock of a
	// pass of it in the other path (docs/leader.md, "Workers and the
	// rollbacks' priority").
	HarmQueueWait prometheus.Histogram
	// HarmLockWait is kerf_leader_harm_lock_wait_seconds: the part of a
	// harm request's wait that its pass spent on a worker, waiting for
	// the recommendation's lock. A pass of it in the other path held the
	// lock; the rest of the wait was for a worker.
	HarmLockWait prometheus.Histogram
	// Degraded is kerf_degraded_recommendations{namespace}: how many
	// recommendations are in phase Degraded (docs/monitoring.md).
	Degraded *prometheus.GaugeVec

	// mu guards degraded, the Degraded recommendations by namespace and
	// name. It holds only recommendations that exist and are Degraded,
	// so it is bounded by the cluster's recommendations.
	mu       sync.Mutex
	degraded map[string]map[string]bool
}

// harmWaitBuckets are the buckets of the harm requests' waits, in seconds.
var harmWaitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewMetrics registers the leader's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_actions_total",
			Help: "Actions the leader took, by type (applied, rolled_back, failed, healthy, blocked), reason and resource (cpu, memory).",
		}, []string{"type", "reason", "resource"}),
		InvalidStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_status_writes_invalid_total",
			Help: "Recommendation status writes the apiserver refused as invalid (422), by outcome: fallback (written again without the messages) or refused.",
		}, []string{"outcome"}),
		HarmQueueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kerf_leader_harm_queue_wait_seconds",
			Help:    "How long a harm signal's request (an OOM kill, a container restart or termination) waited from its enqueue to the start of its recommendation's pass.",
			Buckets: harmWaitBuckets,
		}),
		HarmLockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kerf_leader_harm_lock_wait_seconds",
			Help:    "Of a harm signal's request's wait, how long its pass waited on a worker for the recommendation's lock, held by a pass of it in the other path.",
			Buckets: harmWaitBuckets,
		}),
		Degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kerf_degraded_recommendations",
			Help: "Recommendations in phase Degraded, by namespace: too many of their workload's last changes were rolled back, and Kerf leaves them alone until resumed.",
		}, []string{"namespace"}),
		degraded: map[string]map[string]bool{},
	}
	reg.MustRegister(m.Actions, m.InvalidStatus, m.HarmQueueWait, m.HarmLockWait, m.Degraded)
	return m
}

// setDegraded records whether the recommendation ns/name is Degraded
// after a pass (false once it is gone) in kerf_degraded_recommendations.
// A namespace left with none is removed from the gauge.
func (m *Metrics) setDegraded(ns, name string, degraded bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := m.degraded[ns]
	if degraded == names[name] {
		return
	}
	if degraded {
		if names == nil {
			names = map[string]bool{}
			m.degraded[ns] = names
		}
		names[name] = true
	} else {
		delete(names, name)
	}
	if len(names) == 0 {
		delete(m.degraded, ns)
		m.Degraded.DeleteLabelValues(ns)
		return
	}
	m.Degraded.WithLabelValues(ns).Set(float64(len(names)))
}

// count adds one per resource the action touched; an action that touched
// no resource (a block before anything was planned) counts once with
// resource "".
func (m *Metrics) count(a *v1alpha1.Action) {
	if len(a.Resources) == 0 {
		m.Actions.WithLabelValues(string(a.Type), a.Reason, "").Inc()
		return
	}
	for _, r := range a.Resources {
		m.Actions.WithLabelValues(string(a.Type), a.Reason, string(r)).Inc()
	}
}
