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

// Collector exports the sampler's latest samples (throttling counters and
// usage) and the containers' OOM kill counts under cadvisor's metric names
// and labels (docs/design.md section 5), plus the sampler's health. Every series is a const metric
// made at scrape time, so a container that is no longer tracked has none.
type Collector struct {
	sampler *Sampler
	oom     OOMCounts

	periods, throttledPeriods, throttledSeconds, oomEvents   *prometheus.Desc
	cpuUsage, workingSet, maxUsage                           *prometheus.Desc
	samples, usageReads, readErrors, gone, notFound, tracked *prometheus.Desc
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
		// cadvisor's help texts and labels (its metrics/prometheus.go):
		// the kubelet's cadvisor exports the CPU total only, as cpu="total".
		cpuUsage: prometheus.NewDesc("container_cpu_usage_seconds_total",
			"Cumulative cpu time consumed in seconds.", append(containerLabels[:len(containerLabels):len(containerLabels)], "cpu"), nil),
		workingSet: prometheus.NewDesc("container_memory_working_set_bytes",
			"Current working set in bytes.", containerLabels, nil),
		maxUsage: prometheus.NewDesc("container_memory_max_usage_bytes",
			"Maximum memory usage recorded in bytes", containerLabels, nil),
		samples: prometheus.NewDesc("kerf_agent_samples_total",
			"cpu.stat readings the sampler made.", nil, nil),
		usageReads: prometheus.NewDesc("kerf_agent_usage_reads_total",
			"Full usage readings (CPU, memory, memory.stat, peak) the sampler made.", nil, nil),
		readErrors: prometheus.NewDesc("kerf_agent_read_errors_total",
			"Failed opens and reads of cpu.stat and the usage files, other than of a removed cgroup.", nil, nil),
		gone: prometheus.NewDesc("kerf_agent_cgroups_gone_total",
			"Tracked containers whose cgroup was found removed.", nil, nil),
		notFound: prometheus.NewDesc("kerf_agent_cgroups_not_found_total",
			"Running containers whose cgroup was not where the layout names it at their first read (kerf_agent_layout_problem says when none is found).", nil, nil),
		tracked: prometheus.NewDesc("kerf_agent_tracked_containers",
			"Containers the sampler tracks.", nil, nil),
	}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.periods, c.throttledPeriods, c.throttledSeconds, c.oomEvents,
		c.cpuUsage, c.workingSet, c.maxUsage, c.samples, c.usageReads, c.readErrors, c.gone, c.notFound, c.tracked} {
		ch <- d
	}
}

// seriesKey is a container's label values. Two tracked containers can share
// them (a pod deleted and created again under the same name while the old
// one's containers still run); the one added last is exported.
type seriesKey struct{ namespace, pod, container string }

// Collect sends the latest sample of every tracked container read at least
// once, the latest usage of every one whose usage was read, every tracked
// container's OOM count, and the sampler's health. The memory peak is the
// kernel's (since the cgroup was created, as cadvisor's), or where the
// kernel keeps none the largest the sampler saw.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		c                 Container
		labels, cpuLabels []*dto.LabelPair
		s                 report.Sample
		ok                bool
		seq               uint64
		usage             report.Usage
		maxUsage          uint64
		usageOK           bool
	}
	var list []series
	byKey := map[seriesKey]int{}
	c.sampler.each(func(e *tracked) {
		k := seriesKey{e.c.Namespace, e.c.Pod, e.c.Name}
		if e.labels == nil {
			e.labels = labelPairs(e.c)
			e.cpuLabels = cpuLabelPairs(e.c)
		}
		s := series{c: e.c, labels: e.labels, cpuLabels: e.cpuLabels, s: e.last, ok: e.sampled, seq: e.seq,
			usage: e.usage, maxUsage: e.maxUsage, usageOK: e.usageOK}
		if e.reading.PeakAvailable {
			s.maxUsage = e.reading.Peak
		}
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
	counters := make([]counter, 0, 7*len(list))
	send := func(d *prometheus.Desc, labels []*dto.LabelPair, v float64) {
		counters = append(counters, counter{desc: d, labels: labels, value: v})
		ch <- &counters[len(counters)-1]
	}
	sendGauge := func(d *prometheus.Desc, labels []*dto.LabelPair, v float64) {
		counters = append(counters, counter{desc: d, labels: labels, value: v, gauge: true})
		ch <- &counters[len(counters)-1]
	}
	for _, s := range list {
		if s.ok {
			send(c.periods, s.labels, float64(s.s.Periods))
			send(c.throttledPeriods, s.labels, float64(s.s.Throttled))
			send(c.throttledSeconds, s.labels, s.s.ThrottledTime.Seconds())
		}
		if s.usageOK {
			send(c.cpuUsage, s.cpuLabels, s.usage.CPU.Seconds())
			sendGauge(c.workingSet, s.labels, float64(s.usage.WorkingSet))
			sendGauge(c.maxUsage, s.labels, float64(s.maxUsage))
		}
		if c.oom != nil {
			// Keyed by the memory cgroup path: under the kubelet's layouts
			// it is the container's cpu cgroup path too.
			send(c.oomEvents, s.labels, float64(c.oom.Count(s.c.CgroupPath)))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(stats.Samples))
	ch <- prometheus.MustNewConstMetric(c.usageReads, prometheus.CounterValue, float64(stats.UsageReads))
	ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(stats.ReadErrors))
	ch <- prometheus.MustNewConstMetric(c.notFound, prometheus.CounterValue, float64(stats.NotFound))
	ch <- prometheus.MustNewConstMetric(c.gone, prometheus.CounterValue, float64(stats.Gone))
	ch <- prometheus.MustNewConstMetric(c.tracked, prometheus.GaugeValue, float64(stats.Tracked))
}

// Label names of labelPairs, sorted as the registry wants them, and the
// one value of cpu.
var (
	labelContainer = "container"
	labelCPU       = "cpu"
	labelNamespace = "namespace"
	labelPod       = "pod"
	cpuTotal       = "total"
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

// cpuLabelPairs are labelPairs with cadvisor's cpu="total", sorted by
// name.
func cpuLabelPairs(c Container) []*dto.LabelPair {
	return []*dto.LabelPair{
		{Name: &labelContainer, Value: &c.Name},
		{Name: &labelCPU, Value: &cpuTotal},
		{Name: &labelNamespace, Value: &c.Namespace},
		{Name: &labelPod, Value: &c.Pod},
	}
}

// counter is a const counter (or gauge) whose label pairs are made once per container
// rather than at every scrape, as prometheus.MustNewConstMetric would: a
// scrape of 330 containers allocated about 22,000 times. The registry only
// reads the pairs, so scrapes share them.
type counter struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	gauge  bool
}

// Desc is the counter's descriptor.
func (m *counter) Desc() *prometheus.Desc { return m.desc }

// Write fills out with the counter's labels and value.
func (m *counter) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.gauge {
		out.Gauge = &dto.Gauge{Value: &m.value}
		return nil
	}
	out.Counter = &dto.Counter{Value: &m.value}
	return nil
}
