package node

import (
	"github.com/kerf-dev/kerf/node/report"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
		c      Container
		labels []*dto.LabelPair
		s      report.Sample
		ok     bool
		seq    uint64
	}
	var list []series
	byKey := map[seriesKey]int{}
	c.sampler.each(func(e *tracked) {
		k := seriesKey{e.c.Namespace, e.c.Pod, e.c.Name}
		if e.labels == nil {
			e.labels = labelPairs(e.c)
		}
		s := series{c: e.c, labels: e.labels, s: e.last, ok: e.sampled, seq: e.seq}
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
	// One allocation for every container series of this scrape.
	counters := make([]counter, 0, 4*len(list))
	send := func(d *prometheus.Desc, labels []*dto.LabelPair, v float64) {
		counters = append(counters, counter{desc: d, labels: labels, value: v})
		ch <- &counters[len(counters)-1]
	}
	for _, s := range list {
		if s.ok {
			send(c.periods, s.labels, float64(s.s.Periods))
			send(c.throttledPeriods, s.labels, float64(s.s.Throttled))
			send(c.throttledSeconds, s.labels, s.s.ThrottledTime.Seconds())
		}
		if c.oom != nil {
			// Keyed by the memory cgroup path: under the kubelet's layouts
			// it is the container's cpu cgroup path too.
			send(c.oomEvents, s.labels, float64(c.oom.Count(s.c.CgroupPath)))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(stats.Samples))
	ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(stats.ReadErrors))
	ch <- prometheus.MustNewConstMetric(c.gone, prometheus.CounterValue, float64(stats.Gone))
	ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(stats.Tracked))
}

// Label names of labelPairs, sorted as the registry wants them.
var (
	labelContainer = "container"
	labelNamespace = "namespace"
	labelPod       = "pod"
)

// labelPairs are c's values of containerLabels, sorted by name, as
// prometheus.MakeLabelPairs makes them.
func labelPairs(c Container) []*dto.LabelPair {
	return []*dto.LabelPair{
		{Name: &labelContainer, Value: &c.Name},
		{Name: &labelNamespace, Value: &c.Namespace},
		{Name: &labelPod, Value: &c.Pod},
	}
}

// counter is a const counter whose label pairs are made once per container
// rather than at every scrape, as prometheus.MustNewConstMetric would: a
// scrape of 330 containers allocated about 22,000 times. The registry only
// reads the pairs, so scrapes share them.
type counter struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

// Desc is the counter's descriptor.
func (m *counter) Desc() *prometheus.Desc { return m.desc }

// Write fills out with the counter's labels and value.
func (m *counter) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Counter = &dto.Counter{Value: &m.value}
	return nil
}
