package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Metrics are the leader's own metrics (docs/design.md section 7).
type Metrics struct {
	// Actions counts kerf_actions_total{type,reason,resource}: one per
	// resource an action touched (applied, rolled_back, failed, blocked).
	Actions *prometheus.CounterVec
}

// NewMetrics registers the leader's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_actions_total",
			Help: "Actions the leader took, by type (applied, rolled_back, failed, blocked), reason and resource (cpu, memory).",
		}, []string{"type", "reason", "resource"}),
	}
	reg.MustRegister(m.Actions)
	return m
}

// count adds one action per resource; an action that touched no resource
// (a block before anything was planned) counts once with resource "".
func (m *Metrics) count(t v1alpha1.ActionType, reason string, resources []v1alpha1.ResourceName) {
	if len(resources) == 0 {
		m.Actions.WithLabelValues(string(t), reason, "").Inc()
		return
	}
	for _, r := range resources {
		m.Actions.WithLabelValues(string(t), reason, string(r)).Inc()
	}
}
