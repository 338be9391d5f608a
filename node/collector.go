package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

// OOMCounts gives a container's OOM kill count by its memory cgroup path;
// *oom.Counts is one.
type OOMCounts interface {
	Count(cgroup string) uint64
}

// containerLabels are cadvisor's labels for a container's series.
var containerLabels = []string{"namespace", "pod", "container"}

// Collector exports the sampler's latest samples and the containers' OOM
// kill counts under cadvisor's metric names and labels (docs/design.md
// section 5), plus the sampler's health. Every series is a const metric
// made at scrape time, so a container that is no longer tracked has none.
type Collector struct {
	sampler *Sampler
	oom     OOMCounts

	periods, throttledPeriods, throttledSeconds, oomEvents *prometheus.Desc
	samples, readErrors, gone, tracked                     *prometheus.Desc
}

// NewCollector returns a collector of s's samples and oom's counts; oom may
// be nil, and then no OOM series are exported.
func NewCollector(s *Sampler, oom OOMCounts) *Collector {
	return &Collector{
		sampler: s,
		oom:     oom,
		periods: prometheus.NewDesc("container_cpu_cfs_periods_total",
			"Number of elapsed enforcement period intervals.", containerLabels, nil),
		throttledPeriods: prometheus.NewDesc("container_cpu_cfs_throttled_periods_total",
			"Number of throttled period intervals.", containerLabels, nil),
		throttledSeconds: prometheus.NewDesc("container_cpu_cfs_throttled_seconds_total",
			"Total time duration the container has been throttled.", containerLabels, nil),
		oomEvents: prometheus.NewDesc("container_oom_events_total",
			"Count of out of memory events observed for the container.", containerLabels, nil),
		samples: prometheus.NewDesc("kerf_agent_samples_total",
			"cpu.stat readings the sampler made.", nil, nil),
		readErrors: prometheus.NewDesc("kerf_agent_read_errors_total",
			"Failed opens and reads of cpu.stat, other than of a removed cgroup.", nil, nil),
		gone: prometheus.NewDesc("kerf_agent_cgroups_gone_total",
			"Tracked containers whose cgroup was found removed.", nil, nil),
		tracked: prometheus.NewDesc("kerf_agent_tracked_containers",
			"Containers the sampler tracks.", nil, nil),
	}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.periods, c.throttledPeriods, c.throttledSeconds, c.oomEvents,
		c.samples, c.readErrors, c.gone, c.tracked} {
		ch <- d
	}
}

// seriesKey is a container's label values. Two tracked containers can share
// them (a pod deleted and created again under the same name while the old
// one's containers still run); the one added last is exported.
type seriesKey struct{ namespace, pod, container string }

// Collect sends the latest sample of every tracked container read at least
// once, every tracked container's OOM count, and the sampler's health.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		c   Container
		s   Sample
		ok  bool
		seq uint64
	}
	var list []series
	byKey := map[seriesKey]int{}
	c.sampler.each(func(e *tracked) {
		k := seriesKey{e.c.Namespace, e.c.Pod, e.c.Name}
		s := series{c: e.c, s: e.last, ok: e.sampled, seq: e.seq}
		if i, dup := byKey[k]; dup {
			if list[i].seq < s.seq {
				list[i] = s
			}
			return
		}
		byKey[k] = len(list)
		list = append(list, s)
	})
	stats := c.sampler.Stats()
	for _, s := range list {
		lv := []string{s.c.Namespace, s.c.Pod, s.c.Name}
		if s.ok {
			ch <- prometheus.MustNewConstMetric(c.periods, prometheus.CounterValue, float64(s.s.Periods), lv...)
			ch <- prometheus.MustNewConstMetric(c.throttledPeriods, prometheus.CounterValue, float64(s.s.Throttled), lv...)
			ch <- prometheus.MustNewConstMetric(c.throttledSeconds, prometheus.CounterValue, s.s.ThrottledTime.Seconds(), lv...)
		}
		if c.oom != nil {
			// Keyed by the memory cgroup path: under the kubelet's layouts
			// it is the container's cpu cgroup path too.
			ch <- prometheus.MustNewConstMetric(c.oomEvents, prometheus.CounterValue, float64(c.oom.Count(s.c.CgroupPath)), lv...)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(stats.Samples))
	ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(stats.ReadErrors))
	ch <- prometheus.MustNewConstMetric(c.gone, prometheus.CounterValue, float64(stats.Gone))
	ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(stats.Tracked))
}
