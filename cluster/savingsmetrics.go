package cluster

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/savings"
)

// SavingsWindow is the window of the savings metrics' rollbacks and OOM
// kills: the last 24 hours, as `kubectl kerf status --summary` counts by
// default.
const SavingsWindow = 24 * time.Hour

// savingsScrapeTimeout bounds one scrape's read of the recommendations.
const savingsScrapeTimeout = 10 * time.Second

// savingsCollector exports cluster/savings' figures per namespace at each
// scrape, from the recommendations in the cache. Only the leading replica
// exports them, so that a sum over replicas counts each namespace once.
type savingsCollector struct {
	recommendations forward.Recommendations
	leading         func() bool
	now             func() time.Time
	log             *slog.Logger

	cpu, memory, workloads, unrecorded, rollbacks, oomKills *prometheus.Desc
}

// The values label of kerf_savings_cpu_cores and kerf_savings_memory_bytes.
const (
	savingsManifest    = "manifest"
	savingsInForce     = "in_force"
	savingsRecommended = "recommended"
	savingsSaved       = "saved"
)

func newSavingsCollector(recs forward.Recommendations, leading func() bool, now func() time.Time, log *slog.Logger) *savingsCollector {
	ns := []string{"namespace"}
	values := []string{"namespace", "values"}
	how := " Requests of one pod per workload, as Kerf recorded them (docs/kubectl-kerf.md, \"status --summary\")."
	return &savingsCollector{recommendations: recs, leading: leading, now: now, log: log,
		cpu: prometheus.NewDesc("kerf_savings_cpu_cores",
			"CPU requests per namespace, in cores: values manifest, in_force, recommended, and saved (manifest − in_force)."+how, values, nil),
		memory: prometheus.NewDesc("kerf_savings_memory_bytes",
			"Memory requests per namespace, in bytes: values manifest, in_force, recommended, and saved (manifest − in_force)."+how, values, nil),
		workloads: prometheus.NewDesc("kerf_savings_workloads",
			"RightsizingRecommendations per namespace counted in the savings metrics.", ns, nil),
		unrecorded: prometheus.NewDesc("kerf_savings_unrecorded_requests",
			"Container requests per namespace Kerf never changed, so recorded no manifest value for: left out of the savings sums.", ns, nil),
		rollbacks: prometheus.NewDesc("kerf_savings_rollbacks",
			"Rollbacks per namespace in the last 24 hours, from the recommendations' history.", ns, nil),
		oomKills: prometheus.NewDesc("kerf_savings_oom_kills",
			"OOM kills per namespace that triggered a rollback in the last 24 hours, as the health watch counted them.", ns, nil),
	}
}

// Describe sends the savings metrics' descriptions.
func (s *savingsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.cpu, s.memory, s.workloads, s.unrecorded, s.rollbacks, s.oomKills} {
		ch <- d
	}
}

// Collect computes the figures from the cached recommendations; a replica
// that does not lead sends none.
func (s *savingsCollector) Collect(ch chan<- prometheus.Metric) {
	if !s.leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), savingsScrapeTimeout)
	defer cancel()
	recs, err := s.recommendations(ctx)
	if err != nil {
		// The scrape goes on without them; the log says why they are absent.
		s.log.Error("savings metrics: read the recommendations", "err", err)
		return
	}
	now := s.now()
	for _, n := range savings.Summarize(recs, now.Add(-SavingsWindow), now) {
		saved := n.Saved()
		for _, v := range []struct {
			label string
			a     savings.Amounts
		}{{savingsManifest, n.Manifest}, {savingsInForce, n.InForce}, {savingsRecommended, n.Recommended}, {savingsSaved, saved}} {
			ch <- prometheus.MustNewConstMetric(s.cpu, prometheus.GaugeValue, float64(v.a.CPUMillis)/1000, n.Namespace, v.label)
			ch <- prometheus.MustNewConstMetric(s.memory, prometheus.GaugeValue, float64(v.a.MemoryBytes), n.Namespace, v.label)
		}
		ch <- prometheus.MustNewConstMetric(s.workloads, prometheus.GaugeValue, float64(n.Workloads), n.Namespace)
		ch <- prometheus.MustNewConstMetric(s.unrecorded, prometheus.GaugeValue, float64(n.Unrecorded), n.Namespace)
		ch <- prometheus.MustNewConstMetric(s.rollbacks, prometheus.GaugeValue, float64(n.Rollbacks), n.Namespace)
		ch <- prometheus.MustNewConstMetric(s.oomKills, prometheus.GaugeValue, float64(n.OOMKills), n.Namespace)
	}
}
