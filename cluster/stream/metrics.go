package stream

import "github.com/prometheus/client_golang/prometheus"

// Reasons for kerf_stream_dropped_reports_total.
const (
	// DropPodNotOnNode is a report about a pod on another node than the
	// agent's.
	DropPodNotOnNode = "pod_not_on_node"
	// DropPodUnknown is a report about a pod the leader's cache does not
	// hold.
	DropPodUnknown = "pod_unknown"
	// DropContainerUnknown is a container event about a container the
	// pod's spec does not name.
	DropContainerUnknown = "container_unknown"
)

// metrics are the stream's metrics (docs/design.md section 7).
type metrics struct {
	connected prometheus.Gauge
	samples   prometheus.Counter
	resent    prometheus.Counter
	events    *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	streams   prometheus.Gauge
	reviews   prometheus.Counter
	// nodeStates is how many nodes the leader holds a state of: those
	// with a stream and those whose stream ended less than an hour ago.
	nodeStates prometheus.Gauge
	// failingSources is how many source IPs have a failure budget.
	failingSources prometheus.Gauge
	// pending, pendingCounted and expired follow the OOM events about
	// pods the cache did not hold yet.
	pending        prometheus.Gauge
	pendingCounted prometheus.Counter
	expired        *prometheus.CounterVec
	// certificates counts the agents' /metrics certificates by result.
	certificates *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kerf_stream_connected_agents",
			Help: "Node agents with an open, authenticated stream to this leader.",
		}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_stream_samples_total",
			Help: "Counter samples ingested from the agents' streams.",
		}),
		resent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_stream_oom_events_resent_total",
			Help: "OOM events an agent sent again after a reconnect, acknowledged and not counted twice.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_stream_container_events_total",
			Help: "Container events (restarts, terminations) ingested from the agents, by whether they told the leader something new (new) or not (known: seen before, or resent).",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_stream_dropped_reports_total",
			Help: "Reports from agents that were dropped, by reason (pod_not_on_node, pod_unknown, container_unknown).",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_stream_errors_total",
			Help: "Streams the leader closed or refused, by reason.",
		}, []string{"reason"}),
	}
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kerf_stream_open_streams",
		Help: "Authenticated streams open (at most one per node, at most --stream-max-streams).",
	})
	m.nodeStates = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kerf_stream_node_states",
		Help: "Nodes whose agent state the leader holds: with an open stream, or whose stream ended less than an hour ago.",
	})
	m.reviews = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kerf_stream_token_reviews_total",
		Help: "TokenReviews the stream sent to the apiserver (cache misses and re-authentications of open streams).",
	})
	m.failingSources = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kerf_stream_failing_sources",
		Help: "Failure budgets remembered (source IPs and claimed agent pods that failed to authenticate; at most 10,000, the one that failed longest ago goes first).",
	})
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kerf_stream_oom_events_pending",
		Help: "OOM events about pods the leader's cache does not hold yet, kept until the pod appears.",
	})
	m.pendingCounted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kerf_stream_oom_events_pending_counted_total",
		Help: "Pending OOM events counted once their pod appeared in the leader's cache.",
	})
	m.expired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kerf_stream_oom_events_expired_total",
		Help: "Pending OOM events dropped before their pod appeared, by reason (ttl: waited too long; full: the agent's pending list was full).",
	}, []string{"reason"})
	m.certificates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kerf_stream_metrics_certificates_total",
		Help: "Agents' /metrics certificates asked for in a Hello, by result (issued; failed: the leader could not sign one, the agent keeps its last).",
	}, []string{"result"})
	reg.MustRegister(m.connected, m.samples, m.resent, m.events, m.dropped, m.errors, m.streams, m.nodeStates, m.reviews, m.failingSources,
		m.pending, m.pendingCounted, m.expired, m.certificates)
	return m
}
