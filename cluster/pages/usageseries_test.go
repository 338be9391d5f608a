package pages

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/signals"
)

var seriesT0 = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

func TestUsageSeriesKeepsSixHoursOfMinutes(t *testing.T) {
	m0 := minuteOf(seriesT0)
	s := newUsageSeries(m0)
	s.addMemory(m0, 100<<20)
	s.addMemory(m0, 50<<20) // the highest of the minute stays
	s.addCPU(m0, 3, 30)
	s.addCPU(m0+1, 6, 30)
	s.setOOMKills(m0+1, 2)
	s.setOOMKills(m0+1, 1) // a re-read counts once
	s.setThrottled(m0+2, 0)
	pts := s.points()
	require.Len(t, pts, 3)
	assert.Equal(t, seriesT0, pts[0].At)
	assert.Equal(t, int64(100<<20), pts[0].MemoryBytes)
	assert.Equal(t, int64(100), pts[0].CPUMilli, "3 s of CPU over 30 s")
	assert.Equal(t, -1, pts[0].ThrottledPercent, "not read")
	assert.Equal(t, int64(-1), pts[1].MemoryBytes)
	assert.Equal(t, int64(200), pts[1].CPUMilli)
	assert.Equal(t, 2, pts[1].OOMKills)
	assert.Equal(t, 0, pts[2].ThrottledPercent, "read, and none throttled")

	// A minute older than the ring is dropped; six hours on, the first
	// minutes have gone.
	s.addMemory(m0-UsageSeriesPoints, 1<<20)
	assert.Len(t, s.points(), 3)
	s.addMemory(m0+UsageSeriesPoints, 7<<20)
	pts = s.points()
	require.Len(t, pts, 3, "minute m0 fell out of the ring")
	assert.Equal(t, seriesT0.Add(time.Minute), pts[0].At)
	assert.Equal(t, int64(7<<20), pts[2].MemoryBytes)
	// Saturating fields: 7 OOM kills at most, 100% throttled.
	s.setOOMKills(m0+UsageSeriesPoints, 300)
	s.setThrottled(m0+UsageSeriesPoints, 250)
	last := s.points()[2]
	assert.Equal(t, 7, last.OOMKills)
	assert.Equal(t, 100, last.ThrottledPercent)
	assert.Equal(t, int64(7<<20), last.MemoryBytes, "the packed neighbours are untouched")
	// Far on, everything older is cleared.
	s.addMemory(m0+10*UsageSeriesPoints, 9<<20)
	assert.Len(t, s.points(), 1)
}

func TestUsageSeriesCPUIsTheMeanPerPod(t *testing.T) {
	m0 := minuteOf(seriesT0)
	s := newUsageSeries(m0)
	s.addCPU(m0, 6, 30)  // a pod at 200m
	s.addCPU(m0, 12, 30) // another at 400m
	assert.Equal(t, int64(300), s.points()[0].CPUMilli)
	// A reading two minutes late no longer changes the sums.
	s.addCPU(m0+2, 3, 30)
	s.addCPU(m0, 30, 30)
	assert.Equal(t, int64(300), s.points()[0].CPUMilli)
}

// TestUsageSeriesMemoryAtTheCap measures the heap that DefaultUsageSeriesMax
// full series take, as docs/web.md states it.
func TestUsageSeriesMemoryAtTheCap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	u := NewUsageSeries(nil, signals.New(), UsageSeriesConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m0 := minuteOf(seriesT0)
	for i := range DefaultUsageSeriesMax {
		k := seriesKey{namespace: fmt.Sprintf("team-payments-%04d", i/10), kind: v1alpha1.KindDeployment,
			name: fmt.Sprintf("checkout-frontend-%04d", i), container: "app"}
		s := newUsageSeries(m0)
		for m := range int64(UsageSeriesPoints) {
			s.addCPU(m0+m, 3, 30)
			s.addMemory(m0+m, 200<<20)
		}
		u.series[k] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / 1e6
	t.Logf("%d full series of %d points: %.1f MB of heap (%.0f B per series)", u.Len(), UsageSeriesPoints, heap, heap*1e6/float64(u.Len()))
	assert.Less(t, heap, 18.0, "docs/web.md states about 16 MB")
	runtime.KeepAlive(u)
}
