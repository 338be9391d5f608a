package promql

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/freeport"
	"github.com/kerf-dev/kerf/test/promtest"
)

// series is one container instance's counters as cadvisor serves them.
type series struct {
	namespace, pod, container string
	periods, throttled        uint64
}

// countersAt is what the exporter serves at its n-th scrape: p1/app +100
// periods and +25 throttled a scrape; p1/side never throttled; p2/app
// resets at scrape 4; p3/app is born at scrape 3; the same pod name in
// another namespace and the pod-level series must not count.
func countersAt(n uint64) []series {
	s := []series{
		{"ns", "p1", "app", 1000 + 100*n, 200 + 25*n},
		{"ns", "p1", "side", 50 * n, 0},
		{"ns", "p1", "", 99999 * n, 99999 * n},
		{"other", "p1", "app", 77777 * n, 77777 * n},
	}
	if n < 4 {
		s = append(s, series{"ns", "p2", "app", 2000 + 100*n, 500 + 10*n})
	} else {
		s = append(s, series{"ns", "p2", "app", 100 * (n - 3), 30 * (n - 3)})
	}
	if n >= 3 {
		s = append(s, series{"ns", "p3", "app", 100 * (n - 2), 40 * (n - 2)})
	}
	return s
}

// exporter serves countersAt with explicit timestamps, so the samples
// Prometheus stores are exactly the ones it records in mem.
type exporter struct {
	mu     sync.Mutex
	served []time.Time
	mem    *signals.Kernel
	born   map[string]time.Time
}

func podUID(pod string) types.UID { return types.UID("uid-" + pod) }

func (e *exporter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	at := time.Now().Truncate(time.Millisecond)
	if n := len(e.served); n > 0 && !at.After(e.served[n-1]) {
		at = e.served[n-1].Add(time.Millisecond)
	}
	all := countersAt(uint64(len(e.served)))
	e.served = append(e.served, at)
	var b strings.Builder
	for _, m := range []string{PeriodsMetric, ThrottledMetric} {
		fmt.Fprintf(&b, "# TYPE %s counter\n", m)
		for _, s := range all {
			v := s.periods
			if m == ThrottledMetric {
				v = s.throttled
			}
			fmt.Fprintf(&b, "%s{namespace=%q,pod=%q,container=%q,id=%q} %d %d\n",
				m, s.namespace, s.pod, s.container, "/"+s.namespace+"/"+s.pod+"/"+s.container, v, at.UnixMilli())
		}
	}
	for _, s := range all {
		if s.namespace != "ns" || s.container == "" {
			continue
		}
		key := s.pod + "/" + s.container
		if _, ok := e.born[key]; !ok {
			e.born[key] = at
		}
		var started time.Time
		if !e.born[key].Equal(e.served[0]) {
			// Appeared after the first scrape: born then.
			started = e.born[key]
		}
		e.mem.AddSamples(healthwatch.CounterSample{
			PodUID: podUID(s.pod), Container: s.container, Started: started,
			At: at, Periods: s.periods, Throttled: s.throttled,
		})
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

func (e *exporter) scrapes() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.served...)
}

func pods(namespace string, names ...string) []*corev1.Pod {
	out := make([]*corev1.Pod, len(names))
	for i, n := range names {
		out[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: n, UID: podUID(n)}}
	}
	return out
}

func TestThrottleWindowsMatchAgentsStreamOnRealPrometheus(t *testing.T) {
	exp := &exporter{mem: signals.NewKernel(), born: map[string]time.Time{}}
	srv := httptest.NewServer(exp)
	t.Cleanup(srv.Close)
	url := promtest.Start(t, strings.TrimPrefix(srv.URL, "http://"), time.Second)

	// Scrape 6 starting means scrape 5 was stored (one scrape loop).
	require.Eventually(t, func() bool { return len(exp.scrapes()) >= 7 }, 15*time.Second, 50*time.Millisecond)
	at := exp.scrapes()

	reg := prometheus.NewRegistry()
	src, err := New(Config{URL: url}, reg)
	require.NoError(t, err)
	agents := healthwatch.Counters(exp.mem)
	// The odd name proves the quoting parses; it has no series.
	all := pods("ns", "p1", "p2", "p3", "p9", `we"ird\.*|`)
	containers := []string{"app", "side", "db"}

	tests := []struct {
		name     string
		from, to time.Time
		want     map[string]healthwatch.ThrottleWindow
	}{
		{
			// p1 +300/+75; p2 +100, reset to 100, +100: +300/+70; p3 born
			// after from: 300/120 from zero.
			name: "window between samples excludes later samples",
			from: at[2], to: at[5].Add(300 * time.Millisecond),
			want: map[string]healthwatch.ThrottleWindow{
				"app":  {Periods: 900, Throttled: 265},
				"side": {Periods: 150},
			},
		},
		{
			name: "window ends exactly at a sample",
			from: at[2].Add(-time.Millisecond), to: at[4],
			want: map[string]healthwatch.ThrottleWindow{
				"app":  {Periods: 300 + 300 + 200, Throttled: 75 + 50 + 80},
				"side": {Periods: 150},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := src.ThrottleWindows(all, containers, tt.from, tt.to)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			fromAgents, err := agents.ThrottleWindows(all, containers, tt.from, tt.to)
			require.NoError(t, err)
			assert.Equal(t, fromAgents, got, "PromQL and the agents' stream must agree")
		})
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(src.queries.WithLabelValues(resultOK)))

	t.Run("the pod-level entry reads the pod cgroup's series", func(t *testing.T) {
		// cadvisor's pod cgroup, container="": +99999 a scrape. Not
		// read for the containers above, read as the entry "(pod)".
		got, err := src.ThrottleWindows(pods("ns", "p1"), []string{"app", v1alpha1.PodLevel}, at[2], at[5])
		require.NoError(t, err)
		assert.Equal(t, map[string]healthwatch.ThrottleWindow{
			"app":             {Periods: 300, Throttled: 75},
			v1alpha1.PodLevel: {Periods: 3 * 99999, Throttled: 3 * 99999},
		}, got)
	})

	t.Run("pod without series leaves names out", func(t *testing.T) {
		got, err := src.ThrottleWindows(pods("ns", "p9"), containers, at[2], at[5])
		require.NoError(t, err)
		assert.Empty(t, got)
		assert.Equal(t, 1.0, testutil.ToFloat64(src.queries.WithLabelValues(resultEmpty)))
	})
}

func TestThrottleWindowsPrometheusDownIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	src, err := New(Config{URL: "http://" + freeport.Addr(t), Timeout: time.Second}, reg)
	require.NoError(t, err)
	now := time.Now()
	got, err := src.ThrottleWindows(pods("ns", "p1"), []string{"app"}, now.Add(-time.Minute), now)
	require.Error(t, err)
	assert.Nil(t, got)
	assert.Equal(t, 1.0, testutil.ToFloat64(src.queries.WithLabelValues(resultError)))
	assert.Equal(t, 0.0, testutil.ToFloat64(src.queries.WithLabelValues(resultOK)))
}

func TestSelectorQuotesLabelValues(t *testing.T) {
	got := Selector(`n"s`, []string{"a.b", `c\d`}, []string{"app"}, 1500*time.Microsecond)
	assert.Equal(t, `{__name__=~"container_cpu_cfs_periods_total|container_cpu_cfs_throttled_periods_total",`+
		`namespace="n\"s",pod=~"a\\.b|c\\\\d",container=~"app"}[2ms]`, got)
}

func TestNewRejectsEmptyURL(t *testing.T) {
	_, err := New(Config{}, nil)
	assert.ErrorContains(t, err, "health.metricsURL")
}
