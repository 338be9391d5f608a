package node

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeOOM is an OOM count source keyed by memory cgroup path.
type fakeOOM map[string]uint64

func (f fakeOOM) Count(cgroup string) uint64 { return f[cgroup] }

func TestCollectorExportsCadvisorSeriesAndHealth(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 100, 40, 2_500_000_000)
	f.write(t, "/kubepods/b", 7, 0, 0)
	s := NewSampler(f.h)
	defer s.Close()
	b := container("b", "/kubepods/b")
	b.Namespace, b.Pod, b.PodUID = "jobs", "batch-1", "1f0e4a1c-7a8f-4f3c-9d2e-1a2b3c4d5e6f"
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a"), b, container("new", "/kubepods/new")}))
	s.Sample(time.Unix(1, 0)) // "new" has no cgroup: not found
	c := NewCollector(s, fakeOOM{"/kubepods/a": 3})

	want := `
# HELP container_cpu_cfs_periods_total Number of elapsed enforcement period intervals.
# TYPE container_cpu_cfs_periods_total counter
container_cpu_cfs_periods_total{container="a",namespace="default",pod="web-0"} 100
container_cpu_cfs_periods_total{container="b",namespace="jobs",pod="batch-1"} 7
# HELP container_cpu_cfs_throttled_periods_total Number of throttled period intervals.
# TYPE container_cpu_cfs_throttled_periods_total counter
container_cpu_cfs_throttled_periods_total{container="a",namespace="default",pod="web-0"} 40
container_cpu_cfs_throttled_periods_total{container="b",namespace="jobs",pod="batch-1"} 0
# HELP container_cpu_cfs_throttled_seconds_total Total time duration the container has been throttled.
# TYPE container_cpu_cfs_throttled_seconds_total counter
container_cpu_cfs_throttled_seconds_total{container="a",namespace="default",pod="web-0"} 2.5
container_cpu_cfs_throttled_seconds_total{container="b",namespace="jobs",pod="batch-1"} 0
# HELP container_oom_events_total Count of out of memory events observed for the container.
# TYPE container_oom_events_total counter
container_oom_events_total{container="a",namespace="default",pod="web-0"} 3
container_oom_events_total{container="b",namespace="jobs",pod="batch-1"} 0
container_oom_events_total{container="new",namespace="default",pod="web-0"} 0
# HELP kerf_agent_cgroups_gone_total Tracked containers whose cgroup was found removed.
# TYPE kerf_agent_cgroups_gone_total counter
kerf_agent_cgroups_gone_total 0
# HELP kerf_agent_cgroups_not_found_total Running containers whose cgroup was not where the layout names it at their first read (kerf_agent_layout_problem says when none is found).
# TYPE kerf_agent_cgroups_not_found_total counter
kerf_agent_cgroups_not_found_total 1
# HELP kerf_agent_read_errors_total Failed opens and reads of cpu.stat and the usage files, other than of a removed cgroup.
# TYPE kerf_agent_read_errors_total counter
kerf_agent_read_errors_total 0
# HELP kerf_agent_samples_total cpu.stat readings the sampler made.
# TYPE kerf_agent_samples_total counter
kerf_agent_samples_total 2
# HELP kerf_agent_tracked_containers Containers the sampler tracks.
# TYPE kerf_agent_tracked_containers gauge
kerf_agent_tracked_containers 3
# HELP kerf_agent_usage_reads_total Full usage readings (CPU, memory, memory.stat, peak) the sampler made.
# TYPE kerf_agent_usage_reads_total counter
kerf_agent_usage_reads_total 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want)))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	// Once Set drops the gone and removed containers their series go.
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a")}))
	assert.Equal(t, 1, testutil.CollectAndCount(c, "container_cpu_cfs_periods_total"))
	assert.Equal(t, 1, testutil.CollectAndCount(c, "container_oom_events_total"))
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP kerf_agent_tracked_containers Containers the sampler tracks.
# TYPE kerf_agent_tracked_containers gauge
kerf_agent_tracked_containers 1
`), "kerf_agent_tracked_containers"))
}

func TestCollectorExportsNewestOfTwoContainersWithTheSameLabels(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/old", 50, 0, 0)
	f.write(t, "/kubepods/new", 2, 0, 0)
	s := NewSampler(f.h)
	defer s.Close()
	old := container("app", "/kubepods/old")
	recreated := container("app", "/kubepods/new")
	recreated.PodUID = "9a5e4a1c-7a8f-4f3c-9d2e-1a2b3c4d5e6f"
	require.NoError(t, s.Set([]Container{old, recreated}))
	s.Sample(time.Unix(1, 0))
	c := NewCollector(s, nil)
	require.Equal(t, 1, testutil.CollectAndCount(c, "container_cpu_cfs_periods_total"))
	assert.Equal(t, 0, testutil.CollectAndCount(c, "container_oom_events_total"), "no OOM source, no OOM series")
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP container_cpu_cfs_periods_total Number of elapsed enforcement period intervals.
# TYPE container_cpu_cfs_periods_total counter
container_cpu_cfs_periods_total{container="app",namespace="default",pod="web-0"} 2
`), "container_cpu_cfs_periods_total"))
}

// TestCollectorScrapesShareLabelPairsAndSeeNewValues: the label pairs of a
// container are made once and shared by every scrape, including scrapes
// running at once with a sampling pass (go test -race), while the values
// follow the samples.
func TestCollectorScrapesShareLabelPairsAndSeeNewValues(t *testing.T) {
	f := newFixtureTree(t)
	f.write(t, "/kubepods/a", 100, 40, 0)
	s := NewSampler(f.h)
	defer s.Close()
	require.NoError(t, s.Set([]Container{container("a", "/kubepods/a")}))
	s.Sample(time.Unix(1, 0))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(s, fakeOOM{}))
	periods := func() *dto.Metric {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "container_cpu_cfs_periods_total" {
				require.Len(t, mf.Metric, 1)
				return mf.Metric[0]
			}
		}
		t.Fatal("no container_cpu_cfs_periods_total")
		return nil
	}
	first := periods()
	assert.Equal(t, 100.0, first.GetCounter().GetValue())

	f.write(t, "/kubepods/a", 250, 41, 0)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			mfs, err := reg.Gather()
			assert.NoError(t, err)
			assert.NotEmpty(t, mfs)
		})
	}
	s.Sample(time.Unix(2, 0))
	wg.Wait()

	second := periods()
	assert.Equal(t, 250.0, second.GetCounter().GetValue())
	require.Len(t, second.Label, 3)
	for i, l := range second.Label {
		assert.Same(t, first.Label[i], l, "label pair %s is made once", l.GetName())
	}
	assert.Equal(t, []string{"container", "namespace", "pod"}, []string{second.Label[0].GetName(), second.Label[1].GetName(), second.Label[2].GetName()})
	assert.Equal(t, []string{"a", "default", "web-0"}, []string{second.Label[0].GetValue(), second.Label[1].GetValue(), second.Label[2].GetValue()})
}
