package forward

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the Forwarder's kerf_hub_* metrics.
type metrics struct {
	undelivered prometheus.Gauge
	lag         prometheus.Gauge
	dropped     *prometheus.CounterVec
	batches     *prometheus.CounterVec
	savings     *prometheus.CounterVec
}

// newMetrics makes the metrics and registers them on reg (none when nil).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		undelivered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kerf_hub_undelivered",
			Help: "Actions in the recommendations' histories that the hub has not acknowledged yet.",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kerf_hub_delivery_lag_seconds",
			Help: "Age of the oldest action the hub has not acknowledged yet; 0 when all is delivered.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_hub_dropped_total",
			Help: "Actions that will never reach the hub, by reason: trimmed (pushed out of the 100-entry history first), deleted (the recommendation's finalizer timed out), refused (the hub refused the action itself), disabled (a deleted recommendation let go by a leader running without a hub).",
		}, []string{"reason"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_hub_batches_total",
			Help: "Batches sent to the hub (heartbeats included), by result: delivered (200), refused (4xx), failed (5xx, network).",
		}, []string{"result"}),
		savings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_hub_savings_sent_total",
			Help: "Savings reports sent to the hub, by result: delivered (200), refused (4xx: kept until the figures change or the 5-minute heartbeat), failed (5xx, network: tried again 30 s later).",
		}, []string{"result"}),
	}
	for _, r := range []string{"trimmed", "deleted", "refused", "disabled"} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{"delivered", "refused", "failed"} {
		m.batches.WithLabelValues(r)
		m.savings.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.undelivered, m.lag, m.dropped, m.batches, m.savings)
	}
	return m
}

// GaugeReader returns a function that reads the gauge name from g, 0 when
// it is absent. A gauge with labels reads as the sum over them. The leader
// passes kerf_stream_connected_agents as Config.AgentsConnected.
func GaugeReader(g prometheus.Gatherer, name string) func() int {
	return func() int {
		families, err := g.Gather()
		if err != nil {
			return 0
		}
		var sum float64
		for _, mf := range families {
			if mf.GetName() != name || mf.GetType() != dto.MetricType_GAUGE {
				continue
			}
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
		return int(sum)
	}
}
