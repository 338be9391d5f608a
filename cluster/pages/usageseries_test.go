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

func TestUsageSeriesKeepsAnHourOfMinutes(t *testing.T) {
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
	assert.Equal(t, time.Minute, pts[0].Step)
	assert.Equal(t, int64(100<<20), pts[0].MemoryBytes)
	assert.Equal(t, int64(100), pts[0].CPUMilli, "3 s of CPU over 30 s")
	assert.Equal(t, -1, pts[0].ThrottledPercent, "not read")
	assert.Equal(t, int64(-1), pts[1].MemoryBytes)
	assert.Equal(t, int64(200), pts[1].CPUMilli)
	assert.Equal(t, 2, pts[1].OOMKills)
	assert.Equal(t, 0, pts[2].ThrottledPercent, "read, and none throttled")

	// A minute older than the newest hour is not written.
	s.addMemory(m0-ringSlots, 1<<20)
	assert.Len(t, s.points(), 3)
	// Saturating fields: 7 OOM kills at most, 100% throttled.
	s.setOOMKills(m0+2, 300)
	s.setThrottled(m0+2, 250)
	s.addMemory(m0+2, 7<<20)
	last := s.points()[2]
	assert.Equal(t, 7, last.OOMKills)
	assert.Equal(t, 100, last.ThrottledPercent)
	assert.Equal(t, int64(7<<20), last.MemoryBytes, "the packed neighbours are untouched")
}

// TestUsageSeriesFoldsOlderMinutesIntoFiveMinuteBuckets: a minute leaving
// the newest hour is folded into its five-minute bucket (the mean CPU
// rate of the minutes read, the highest working set and throttled share,
// the kills summed). The buckets go back six hours in all, and the
// newest hour stays in minutes.
func TestUsageSeriesFoldsOlderMinutesIntoFiveMinuteBuckets(t *testing.T) {
	m0 := minuteOf(seriesT0) // 12:00, a bucket's first minute
	s := newUsageSeries(m0)
	for m, milli := range []float64{100, 200, 600} { // 12:00 to 12:02; 12:03 and 12:04 not read
		s.addCPU(m0+int64(m), milli/1000*30, 30)
		s.addMemory(m0+int64(m), uint64(m+1)<<20)
	}
	s.setThrottled(m0+1, 40)
	s.setThrottled(m0+2, 10)
	s.setOOMKills(m0, 2)
	s.setOOMKills(m0+2, 3)
	s.addMemory(m0+5, 9<<20) // 12:05, the next bucket

	// An hour and three minutes on, 12:00 to 12:03 have left the minutes:
	// their bucket spans up to 12:04, the hour's first minute.
	s.addMemory(m0+ringSlots+3, 1<<20)
	pts := s.points()
	require.Len(t, pts, 3, "12:00's bucket, 12:05's minute and the newest")
	b := pts[0]
	assert.Equal(t, seriesT0, b.At)
	assert.Equal(t, 4*time.Minute, b.Step)
	assert.Equal(t, int64(300), b.CPUMilli, "the mean of 100m, 200m and 600m; the minutes not read count for nothing")
	assert.Equal(t, int64(3<<20), b.MemoryBytes, "the highest")
	assert.Equal(t, 40, b.ThrottledPercent, "the highest")
	assert.Equal(t, 5, b.OOMKills, "summed")
	assert.Equal(t, seriesT0.Add(5*time.Minute), pts[1].At, "12:05 is still a minute of the newest hour")
	assert.Equal(t, time.Minute, pts[1].Step)

	// A kill the kubelet reports late, in a minute already folded, counts
	// in its bucket; three more saturate it at 7.
	for range 3 {
		s.addOOMKill(m0 + 1)
	}
	assert.Equal(t, 7, s.points()[0].OOMKills)

	// 12:05 is folded once it leaves the hour. Its bucket spans up to
	// 12:07, the hour's first minute now, and 12:00's all five minutes.
	s.addMemory(m0+ringSlots+6, 1<<20)
	pts = s.points()
	require.Len(t, pts, 4)
	assert.Equal(t, 5*time.Minute, pts[0].Step)
	assert.Equal(t, seriesT0.Add(5*time.Minute), pts[1].At)
	assert.Equal(t, 2*time.Minute, pts[1].Step, "12:05 and 12:06 folded; 12:07 is the hour's first minute")
	assert.Equal(t, int64(9<<20), pts[1].MemoryBytes)
	assert.Equal(t, int64(-1), pts[1].CPUMilli, "no CPU read")

	// Six hours after 12:00 its bucket is gone; the one of 12:05 stays.
	s.addMemory(m0+spanMinutes+4, 1<<20)
	pts = s.points()
	assert.Equal(t, seriesT0.Add(5*time.Minute), pts[0].At, "12:00's bucket fell out of the ring")
	// Far on, everything older is cleared.
	s.addMemory(m0+10*spanMinutes, 9<<20)
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
		for m := range spanMinutes {
			s.addCPU(m0+m, 3, 30)
			s.addMemory(m0+m, 200<<20)
		}
		u.series[k] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / 1e6
	t.Logf("%d full series of %d points: %.1f MB of heap (%.0f B per series)", u.Len(), len(u.series[seriesKey{namespace: "team-payments-0000",
		kind: v1alpha1.KindDeployment, name: "checkout-frontend-0000", container: "app"}].points()), heap, heap*1e6/float64(u.Len()))
	assert.Less(t, heap, 7.0, "docs/web.md states about 6 MB")
	runtime.KeepAlive(u)
}
