// Package promql is the health watch's throttling source over a
// Prometheus-compatible endpoint, health.metricsURL (docs/design.md
// section 3).
//
// It reads the cadvisor metrics, labelled namespace, pod and container.
// Per container name over the adopted pods, it sums
// Δcontainer_cpu_cfs_throttled_periods_total and
// Δcontainer_cpu_cfs_periods_total.
//
// Decisions where the design is silent:
//
//   - Exact increases, not PromQL increase(). increase() extrapolates to
//     the window's edges. So it differs from the agents' stream
//     (healthwatch.Counters) by up to a scrape interval at each end, and
//     more for a series born in the window. Design section 3 asks that
//     both sources give the same number for the same counters. So the
//     source fetches the raw samples with one range-vector selector
//     evaluated at the window's end. It computes the increases as
//     healthwatch.Counters does. The baseline is the last sample at or
//     before from. Every sample in (from, to] adds its delta. A drop is a
//     counter reset and adds the new value, as increase() does. For the
//     same samples both sources agree exactly.
//   - The range reaches Lookback before from, to find the baseline: 5m by
//     default, Prometheus' staleness delta. A series with no sample in
//     [from-Lookback, from] is a container born in the window and counts
//     from zero. A restarted container is a new cadvisor series: its id
//     label, the cgroup, is new. A container created shortly before from
//     and first scraped after it is counted from zero too: at most one
//     scrape interval's worth of periods more than the agents' stream.
//   - Resets are per series, as increase() does. The agents' stream
//     resets both counters of an instance together. That is the same for
//     the cgroup counters, which only drop together.
//   - One query per namespace of the given pods fetches both metrics
//     (__name__=~"...|..."), so both counters come from the same scrapes.
//     Label values are regexp-quoted for =~ and quoted as PromQL strings.
//   - A failed query, a result that is not a range vector, and a response
//     with warnings make ThrottleWindows return an error. A partial
//     response could drop a baseline and count a container from zero. The
//     watch treats the error as not evaluated, never as a breach. A
//     container name without series of both metrics is left out, not
//     evaluated.
//   - Every query is bounded by Timeout, 5s by default: ThrottleWindows
//     has no context and the watch calls it synchronously.
//   - kerf_promql_queries_total{result} counts queries by result: ok,
//     empty (no series at all) and error.
//   - The pod-level entry (v1alpha1.PodLevel, "(pod)") is the pod
//     cgroup's counters. cadvisor labels them with an empty container;
//     the agent with container="(pod)". Both are read as the entry when
//     it is asked for, and never otherwise.
package promql

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
)

// The cadvisor metric names of the CFS counters (docs/design.md section 3).
const (
	// PeriodsMetric counts CFS enforcement periods that elapsed (nr_periods).
	PeriodsMetric = "container_cpu_cfs_periods_total"
	// ThrottledMetric counts periods in which the container was throttled
	// (nr_throttled).
	ThrottledMetric = "container_cpu_cfs_throttled_periods_total"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one query.
	DefaultTimeout = 5 * time.Second
	// DefaultLookback is how far before the window's start the baseline
	// sample is looked for: Prometheus' default staleness delta.
	DefaultLookback = 5 * time.Minute
)

// Config says where and how to query.
type Config struct {
	// URL is the Prometheus-compatible endpoint, health.metricsURL.
	URL string
	// Timeout bounds each query; zero means DefaultTimeout.
	Timeout time.Duration
	// Lookback is how far before the window's start the baseline sample
	// is looked for; zero means DefaultLookback.
	Lookback time.Duration
	// RoundTripper is the HTTP transport; nil means api.DefaultRoundTripper.
	RoundTripper http.RoundTripper
}

// Source is a healthwatch.ThrottlingSource over a Prometheus-compatible endpoint.
type Source struct {
	api      promv1.API
	timeout  time.Duration
	lookback time.Duration
	queries  *prometheus.CounterVec
}

var _ healthwatch.ThrottlingSource = (*Source)(nil)

// Query results counted in kerf_promql_queries_total{result}.
const (
	resultOK    = "ok"
	resultEmpty = "empty"
	resultError = "error"
)

// New makes a Source for cfg.URL and registers its metrics with reg (none
// when reg is nil).
func New(cfg Config, reg prometheus.Registerer) (*Source, error) {
	if cfg.URL == "" {
		return nil, errors.New("health.metricsURL: must be an http or https URL, got an empty string")
	}
	if cfg.Timeout < 0 || cfg.Lookback < 0 {
		return nil, fmt.Errorf("promql: timeout %v and lookback %v must not be negative", cfg.Timeout, cfg.Lookback)
	}
	c, err := api.NewClient(api.Config{Address: cfg.URL, RoundTripper: cfg.RoundTripper})
	if err != nil {
		return nil, fmt.Errorf("health.metricsURL %q: %w", cfg.URL, err)
	}
	s := &Source{
		api:      promv1.NewAPI(c),
		timeout:  cmpOr(cfg.Timeout, DefaultTimeout),
		lookback: cmpOr(cfg.Lookback, DefaultLookback),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_promql_queries_total",
			Help: "PromQL queries of the throttling source, by result (ok, empty, error).",
		}, []string{"result"}),
	}
	for _, r := range []string{resultOK, resultEmpty, resultError} {
		s.queries.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(s.queries); err != nil {
			return nil, fmt.Errorf("register kerf_promql_queries_total: %w", err)
		}
	}
	return s, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// ThrottleWindows returns, per container name, the sums over pods of the
// exact increases of the cadvisor CFS counters over [from, to] (see the
// package comment). A name without series is left out; any failed query
// is an error.
func (s *Source) ThrottleWindows(pods []*corev1.Pod, containers []string, from, to time.Time) (map[string]healthwatch.ThrottleWindow, error) {
	out := map[string]healthwatch.ThrottleWindow{}
	containers = slices.DeleteFunc(slices.Clone(containers), func(c string) bool { return c == "" })
	if len(pods) == 0 || len(containers) == 0 || to.Before(from) {
		return out, nil
	}
	byNamespace := map[string][]string{}
	var namespaces []string
	for _, p := range pods {
		if p == nil {
			continue
		}
		names, ok := byNamespace[p.Namespace]
		if !ok {
			namespaces = append(namespaces, p.Namespace)
		}
		if !slices.Contains(names, p.Name) {
			byNamespace[p.Namespace] = append(names, p.Name)
		}
	}
	// have records which metrics each container name has series of.
	have := map[string][2]bool{}
	for _, ns := range namespaces {
		if err := s.query(ns, byNamespace[ns], containers, from, to, out, have); err != nil {
			return nil, err
		}
	}
	for name, h := range have {
		if !h[0] || !h[1] {
			delete(out, name)
		}
	}
	return out, nil
}

// query adds the increases of one namespace's pods to out.
func (s *Source) query(ns string, pods, containers []string, from, to time.Time, out map[string]healthwatch.ThrottleWindow, have map[string][2]bool) error {
	selected := containers
	podLevel := slices.Contains(containers, v1alpha1.PodLevel)
	if podLevel {
		selected = append(slices.Clone(containers), "") // cadvisor's pod cgroup
	}
	q := Selector(ns, pods, selected, to.Sub(from)+s.lookback)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	v, warnings, _, err := s.api.Query(ctx, q, to, promv1.WithTimeout(s.timeout))
	if err == nil && len(warnings) > 0 {
		err = fmt.Errorf("warnings: %s", strings.Join(warnings, "; "))
	}
	if err != nil {
		s.queries.WithLabelValues(resultError).Inc()
		return fmt.Errorf("query throttling counters of namespace %s: %w", ns, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		s.queries.WithLabelValues(resultError).Inc()
		return fmt.Errorf("query throttling counters of namespace %s: got a %s, want a matrix", ns, v.Type())
	}
	if len(m) == 0 {
		s.queries.WithLabelValues(resultEmpty).Inc()
		return nil
	}
	s.queries.WithLabelValues(resultOK).Inc()
	for _, series := range m {
		name := string(series.Metric[model.LabelName("container")])
		if name == "" && podLevel {
			name = v1alpha1.PodLevel
		}
		if !slices.Contains(containers, name) {
			continue
		}
		d := increase(series.Values, from, to)
		w, h := out[name], have[name]
		switch string(series.Metric[model.MetricNameLabel]) {
		case PeriodsMetric:
			w.Periods += d
			h[0] = true
		case ThrottledMetric:
			w.Throttled += d
			h[1] = true
		default:
			continue
		}
		out[name], have[name] = w, h
	}
	return nil
}

// increase is the exact increase of one counter series over [from, to], as
// healthwatch.Counters computes it. It counts from the last sample at or
// before from, or from zero when there is none: the series was born in
// the window. It counts through the last sample at or before to, a drop
// adding the new value.
func increase(samples []model.SamplePair, from, to time.Time) float64 {
	f, t := model.TimeFromUnixNano(from.UnixNano()), model.TimeFromUnixNano(to.UnixNano())
	i := 0
	for i < len(samples) && !samples[i].Timestamp.After(f) {
		i++
	}
	var prev, sum float64
	if i > 0 {
		prev = float64(samples[i-1].Value)
	}
	for _, x := range samples[i:] {
		if x.Timestamp.After(t) {
			break
		}
		v := float64(x.Value)
		if math.IsNaN(v) {
			continue
		}
		if v < prev {
			sum += v
		} else {
			sum += v - prev
		}
		prev = v
	}
	return sum
}

// Selector is the range-vector selector of both CFS counters of the
// containers in the namespace's pods over the rng before the evaluation
// time. Label values are quoted: regexp.QuoteMeta for =~, then as PromQL
// strings.
func Selector(namespace string, pods, containers []string, rng time.Duration) string {
	ms := rng.Milliseconds()
	if rng > time.Duration(ms)*time.Millisecond {
		ms++
	}
	if ms < 1 {
		ms = 1
	}
	return fmt.Sprintf(`{__name__=~%s,namespace=%s,pod=~%s,container=~%s}[%dms]`,
		strconv.Quote(alternatives([]string{PeriodsMetric, ThrottledMetric})),
		strconv.Quote(namespace),
		strconv.Quote(alternatives(pods)),
		strconv.Quote(alternatives(containers)),
		ms)
}

// alternatives is a regexp matching exactly one of values (PromQL anchors
// =~ at both ends).
func alternatives(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = regexp.QuoteMeta(v)
	}
	return strings.Join(q, "|")
}
