package healthwatch

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/test/watchtest"
)

func TestThrottleWindowsAgreeAcrossPaths(t *testing.T) {
	pods, samples := watchtest.ThrottlingFixture(func(pod types.UID, container string, started, at time.Time, periods, throttled uint64) CounterSample {
		return CounterSample{PodUID: pod, Container: container, Started: started, At: at, Periods: periods, Throttled: throttled}
	})
	uids := []types.UID{pods[0].UID, pods[1].UID, pods[2].UID}
	containers := []string{"app", "sidecar"}
	from, to := watchtest.After(2*time.Minute), watchtest.After(17*time.Minute+5*time.Second)

	ordered := sumWindows(samples, uids, containers, from, to)
	require.Len(t, ordered, 2)
	assert.Greater(t, ordered["app"].Periods, float64(MinThrottlingPeriods))

	shuffled := append([]CounterSample(nil), samples...)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	assert.Equal(t, ordered, sumWindows(shuffled, uids, containers, from, to), "sorted fallback")

	m := newRecorded()
	m.AddSamples(shuffled...)
	viaSamples, err := Counters(m).ThrottleWindows(pods, containers, from, to)
	require.NoError(t, err)
	assert.Equal(t, ordered, viaSamples, "Counters")

	// Only the pods and containers asked for.
	one, err := m.ThrottleWindows(pods[:1], []string{"app"}, from, to)
	require.NoError(t, err)
	assert.Equal(t, []string{"app"}, keys(one))
	assert.Less(t, one["app"].Periods, ordered["app"].Periods)
}

func TestIncreaseFollowsPrometheusResets(t *testing.T) {
	s := func(at time.Duration, p, th uint64) CounterSample {
		return CounterSample{PodUID: "a", Container: "app", Started: watchtest.Started, At: watchtest.After(at), Periods: p, Throttled: th}
	}
	tests := []struct {
		name       string
		run        []CounterSample
		wantP, wat float64
	}{
		{"steady", []CounterSample{s(0, 100, 10), s(time.Minute, 200, 30)}, 100, 20},
		{"a drop is a reset: the new value is the increase", []CounterSample{s(0, 100, 10), s(time.Minute, 40, 4), s(2*time.Minute, 90, 8)}, 90, 8},
		{"a drop of either counter resets both", []CounterSample{s(0, 100, 50), s(time.Minute, 150, 20)}, 150, 20},
		{"samples after to are ignored", []CounterSample{s(0, 100, 10), s(time.Minute, 200, 30), s(time.Hour, 900, 900)}, 100, 20},
		{"one sample is its own baseline", []CounterSample{s(time.Minute, 100, 10)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := map[string]ThrottleWindow{}
			AddIncrease(out, tt.run, watchtest.T0, watchtest.After(10*time.Minute))
			assert.Equal(t, ThrottleWindow{Periods: tt.wantP, Throttled: tt.wat}, out["app"])
		})
	}
}

func TestCountersOfNilIsNil(t *testing.T) {
	assert.Nil(t, Counters(nil))
}

func keys(m map[string]ThrottleWindow) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
