package healthwatch

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// throttlingFixture is 3 pods × 2 containers of samples every 10 s from T0
// for 20 minutes, with a counter reset in one series and a restart (a new
// instance started in the window) in another.
func throttlingFixture() (pods []*corev1.Pod, samples []CounterSample) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i, name := range []string{"web-1", "web-2", "web-3"} {
		p := newPod(name, cpuDown)
		pods = append(pods, &p)
		for _, c := range []string{"app", "sidecar"} {
			var periods, throttled uint64 = 50000, 1000
			inst := started
			for j := range 120 {
				at := after(time.Duration(j) * 10 * time.Second)
				switch {
				case i == 1 && c == "app" && j == 60: // reset within the instance
					periods, throttled = 0, 0
				case i == 2 && c == "sidecar" && j == 40: // a restart
					inst, periods, throttled = at.Add(-3*time.Second), 0, 0
				}
				d := uint64(rng.IntN(100))
				periods += d
				throttled += d * uint64(rng.IntN(4)) / 4
				samples = append(samples, CounterSample{PodUID: p.UID, Container: c, Started: inst, At: at, Periods: periods, Throttled: throttled})
			}
		}
	}
	return pods, samples
}

func TestThrottleWindowsAgreeAcrossPaths(t *testing.T) {
	pods, samples := throttlingFixture()
	uids := []types.UID{pods[0].UID, pods[1].UID, pods[2].UID}
	containers := []string{"app", "sidecar"}
	from, to := after(2*time.Minute), after(17*time.Minute+5*time.Second)

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
		return CounterSample{PodUID: "a", Container: "app", Started: started, At: after(at), Periods: p, Throttled: th}
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
			AddIncrease(out, tt.run, t0, after(10*time.Minute))
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
