package scale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPassFiguresReadTheStepsHistogram checks the recommending benchmark's
// reading of kerf_recommender_pass_seconds: per step, the passes, their sum
// and the bucket the slowest fell under.
func TestPassFiguresReadTheStepsHistogram(t *testing.T) {
	before := `kerf_recommender_pass_seconds_bucket{step="recommend",le="0.1"} 2
kerf_recommender_pass_seconds_bucket{step="recommend",le="1"} 2
kerf_recommender_pass_seconds_bucket{step="recommend",le="+Inf"} 2
kerf_recommender_pass_seconds_sum{step="recommend"} 0.1
kerf_recommender_pass_seconds_count{step="recommend"} 2
kerf_recommender_pass_seconds_bucket{step="feed",le="0.1"} 2
kerf_recommender_pass_seconds_bucket{step="feed",le="+Inf"} 2
kerf_recommender_pass_seconds_sum{step="feed"} 0.05
kerf_recommender_pass_seconds_count{step="feed"} 2
`
	after := `kerf_recommender_pass_seconds_bucket{step="recommend",le="0.1"} 3
kerf_recommender_pass_seconds_bucket{step="recommend",le="1"} 4
kerf_recommender_pass_seconds_bucket{step="recommend",le="+Inf"} 4
kerf_recommender_pass_seconds_sum{step="recommend"} 0.8
kerf_recommender_pass_seconds_count{step="recommend"} 4
kerf_recommender_pass_seconds_bucket{step="feed",le="0.1"} 2
kerf_recommender_pass_seconds_bucket{step="feed",le="+Inf"} 3
kerf_recommender_pass_seconds_sum{step="feed"} 30.05
kerf_recommender_pass_seconds_count{step="feed"} 3
`
	from, err := parsePasses(before)
	require.NoError(t, err)
	to, err := parsePasses(after)
	require.NoError(t, err)
	assert.InDelta(t, 0.7, to["recommend"].sum-from["recommend"].sum, 1e-9)
	assert.Equal(t, 2.0, to["recommend"].count-from["recommend"].count)
	assert.Equal(t, "≤ 1 s", slowest(from["recommend"], to["recommend"]))
	assert.Equal(t, "above the last bucket", slowest(from["feed"], to["feed"]))
	assert.Zero(t, to["total"].count, "a step the leader did not expose reads as no pass")

	_, err = parsePasses(`kerf_recommender_pass_seconds_bucket{step="feed",le="x"} 1`)
	assert.Error(t, err, "a bound that is not a number")
}

// TestPeakRateIsTheFastestWindow checks the peak write rate: the highest
// rate over any window of at least win, not the mean.
func TestPeakRateIsTheFastestWindow(t *testing.T) {
	at := time.Unix(0, 0)
	samples := []writeSample{
		{at, 0}, {at.Add(10 * time.Second), 10}, {at.Add(20 * time.Second), 110}, {at.Add(30 * time.Second), 120},
	}
	assert.InDelta(t, 10.0, peakRate(samples, 10*time.Second), 1e-9)
	assert.InDelta(t, 5.5, peakRate(samples, 20*time.Second), 1e-9)
	assert.Zero(t, peakRate(samples[:1], 10*time.Second), "one sample has no rate")
}

// TestHarmWaitsReadAHistogramWithoutLabels checks the reading of the
// leader's harm waits: a histogram without labels, the lock's apart from
// the queue's.
func TestHarmWaitsReadAHistogramWithoutLabels(t *testing.T) {
	raw := `kerf_leader_harm_queue_wait_seconds_bucket{le="0.01"} 48
kerf_leader_harm_queue_wait_seconds_bucket{le="0.25"} 50
kerf_leader_harm_queue_wait_seconds_bucket{le="+Inf"} 50
kerf_leader_harm_queue_wait_seconds_sum 0.3
kerf_leader_harm_queue_wait_seconds_count 50
kerf_leader_harm_lock_wait_seconds_bucket{le="0.01"} 50
kerf_leader_harm_lock_wait_seconds_bucket{le="0.25"} 50
kerf_leader_harm_lock_wait_seconds_bucket{le="+Inf"} 50
kerf_leader_harm_lock_wait_seconds_sum 0.002
kerf_leader_harm_lock_wait_seconds_count 50
`
	queue, err := parseHistogram(raw, "kerf_leader_harm_queue_wait_seconds")
	require.NoError(t, err)
	lock, err := parseHistogram(raw, "kerf_leader_harm_lock_wait_seconds")
	require.NoError(t, err)
	assert.Equal(t, 50.0, queue.count)
	assert.InDelta(t, 0.3, queue.sum, 1e-9)
	assert.Equal(t, "≤ 0.25 s", slowest(passHistogram{}, queue))
	assert.Equal(t, "≤ 0.01 s", slowest(passHistogram{}, lock))
}

// TestTheHighestSampleKeepsItsParts checks the split of the leader's
// highest RSS: the sample of the highest RSS within the span, with its
// own anonymous and file-backed parts, not the highest of each.
func TestTheHighestSampleKeepsItsParts(t *testing.T) {
	at := time.Unix(0, 0)
	u := &usage{
		times: []time.Time{at, at.Add(time.Second), at.Add(2 * time.Second), at.Add(3 * time.Second)},
		cpus:  make([]time.Duration, 4),
		rss:   []uint64{100, 130, 120, 200},
		anon:  []uint64{90, 80, 110, 150},
		file:  []uint64{10, 50, 10, 50},
	}
	m, when := u.highest(at, at.Add(2*time.Second))
	assert.Equal(t, procMemory{rss: 130, anon: 80, file: 50}, m)
	assert.Equal(t, at.Add(time.Second), when)
	m, _ = u.highest(at, at.Add(time.Hour))
	assert.Equal(t, uint64(200), m.rss, "the span's end is in it")
}
