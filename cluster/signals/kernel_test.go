package signals

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/test/watchtest"
)

func TestKernelSignalsEachPodOnce(t *testing.T) {
	m := NewKernel()
	var got []Signal
	cancel := m.Subscribe(func(s Signal) { got = append(got, s) })

	m.AddOOMKill("a", "app", watchtest.After(time.Minute))
	m.AddSamples(
		healthwatch.CounterSample{PodUID: "a", Container: "app", At: watchtest.After(time.Second)},
		healthwatch.CounterSample{PodUID: "b", Container: "app", At: watchtest.After(time.Second)},
		healthwatch.CounterSample{PodUID: "a", Container: "sidecar", At: watchtest.After(time.Second)},
	)
	assert.Equal(t, []Signal{{"a", SignalOOMKill}, {"a", SignalCounters}, {"b", SignalCounters}}, got)

	cancel()
	m.AddOOMKill("a", "app", watchtest.After(2*time.Minute))
	assert.Len(t, got, 3, "no signal after cancel")
}

func TestKernelSubscriberMayReadTheSource(t *testing.T) {
	m := NewKernel()
	var n int
	var ok bool
	m.Subscribe(func(s Signal) { n, ok = m.OOMKills(s.PodUID, "app", watchtest.T0, watchtest.After(time.Hour)) })
	m.AddOOMKill("a", "app", watchtest.After(time.Minute))
	assert.True(t, ok)
	assert.Equal(t, 1, n, "the kill is stored before subscribers hear of it")
}

func TestKernelOOMKillsInRange(t *testing.T) {
	m := NewKernel()
	for _, d := range []time.Duration{-time.Minute, 0, time.Minute, 10 * time.Minute, 10 * time.Minute, 31 * time.Minute} {
		m.AddOOMKill("a", "app", watchtest.After(d))
	}
	m.AddSamples(healthwatch.CounterSample{PodUID: "a", Container: "sidecar", At: watchtest.T0})

	tests := []struct {
		name      string
		pod       types.UID
		container string
		from, to  time.Time
		want      int
		known     bool
	}{
		{"(T0, end]", "a", "app", watchtest.T0, watchtest.After(30 * time.Minute), 3, true},
		{"the end is inclusive", "a", "app", watchtest.T0, watchtest.After(10 * time.Minute), 3, true},
		{"the start is exclusive", "a", "app", watchtest.After(time.Minute), watchtest.After(time.Hour), 3, true},
		{"samples make a container known", "a", "sidecar", watchtest.T0, watchtest.After(time.Hour), 0, true},
		{"an unknown container", "a", "other", watchtest.T0, watchtest.After(time.Hour), 0, false},
		{"an unknown pod", "b", "app", watchtest.T0, watchtest.After(time.Hour), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, known := m.OOMKills(tt.pod, tt.container, tt.from, tt.to)
			assert.Equal(t, tt.want, n)
			assert.Equal(t, tt.known, known)
		})
	}
}

func TestKernelSamplesFromTheWindowStart(t *testing.T) {
	m := NewKernel()
	s := func(container string, started, at time.Duration, p uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: "a", Container: container, Started: watchtest.After(started), At: watchtest.After(at), Periods: p}
	}
	// Out of order, with a duplicate: the newest counters win.
	m.AddSamples(s("app", -time.Hour, 3*time.Minute, 30), s("app", -time.Hour, time.Minute, 10), s("app", -time.Hour, 2*time.Minute, 20),
		s("app", -time.Hour, 4*time.Minute, 40), s("app", -time.Hour, 2*time.Minute, 21))
	m.AddSamples(s("app", 150*time.Second, 3*time.Minute, 5), s("other", -time.Hour, time.Hour, 1))
	m.AddSamples(healthwatch.CounterSample{PodUID: "b", Container: "app", At: watchtest.After(3 * time.Minute)})

	got, err := m.Samples([]types.UID{"a", "c"}, watchtest.After(2*time.Minute+time.Second), watchtest.After(3*time.Minute))
	require.NoError(t, err)
	assert.ElementsMatch(t, []healthwatch.CounterSample{
		s("app", -time.Hour, 2*time.Minute, 21), // the latest at or before from
		s("app", -time.Hour, 3*time.Minute, 30),
		s("app", 150*time.Second, 3*time.Minute, 5),
	}, got)
}

func TestKernelPruneKeepsWindowStart(t *testing.T) {
	m := NewKernel()
	for i := range 10 {
		m.AddSamples(healthwatch.CounterSample{PodUID: "a", Container: "app", At: watchtest.After(time.Duration(i) * time.Minute), Periods: uint64(i)})
	}
	m.AddOOMKill("a", "app", watchtest.After(time.Minute))
	m.AddOOMKill("a", "app", watchtest.After(6*time.Minute))
	m.Prune(watchtest.After(5*time.Minute + time.Second))

	got, err := m.Samples([]types.UID{"a"}, watchtest.After(5*time.Minute+time.Second), watchtest.After(time.Hour))
	require.NoError(t, err)
	require.Len(t, got, 5)
	assert.Equal(t, uint64(5), got[0].Periods)
	n, _ := m.OOMKills("a", "app", watchtest.T0, watchtest.After(time.Hour))
	assert.Equal(t, 1, n)

	m.ForgetPod("a")
	_, known := m.OOMKills("a", "app", watchtest.T0, watchtest.After(time.Hour))
	assert.False(t, known)
}

func TestKernelConcurrentUse(t *testing.T) {
	m := NewKernel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	signals := 0
	m.Subscribe(func(Signal) { mu.Lock(); signals++; mu.Unlock() })
	for w := range 4 {
		uid := types.UID([]string{"a", "b", "c", "d"}[w])
		wg.Go(func() {
			for i := range 500 {
				m.AddSamples(healthwatch.CounterSample{PodUID: uid, Container: "app", At: watchtest.After(time.Duration(i) * time.Second), Periods: uint64(i)})
				if i%100 == 0 {
					m.AddOOMKill(uid, "app", watchtest.After(time.Duration(i)*time.Second))
				}
			}
		})
		wg.Go(func() {
			for range 100 {
				_, _ = m.Samples([]types.UID{uid}, watchtest.T0, watchtest.After(time.Hour))
				_, _ = m.OOMKills(uid, "app", watchtest.T0, watchtest.After(time.Hour))
				m.Prune(watchtest.T0)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 4*(500+5), signals)
	got, err := m.Samples([]types.UID{"a", "b", "c", "d"}, watchtest.T0, watchtest.After(time.Hour))
	require.NoError(t, err)
	assert.Len(t, got, 4*500)
}

// TestKernelCompactionKeepsEveryWindowExact feeds two sources the
// same samples in real time order, one compacting and one keeping every
// sample, while three watches ask for their windows as the health watch
// does (from the window's opening, and once after the end): the sums, the
// OOM kills and healthwatch.Evaluate's verdicts must be equal at every step, with
// counter resets, a restarted container and a deleted pod on the way.
func TestKernelCompactionKeepsEveryWindowExact(t *testing.T) {
	const step, steps = time.Second, 2700
	compact := NewKernel(WithCompaction(DefaultRecent), WithPinTTL(5*time.Minute))
	full := NewKernel()
	var pods []corev1.Pod
	for _, name := range []string{"web-1", "web-2", "web-3", "web-4"} {
		pods = append(pods, watchtest.NewPod(name, watchtest.CPUDown))
	}
	podPtrs := []*corev1.Pod{&pods[0], &pods[1], &pods[2], &pods[3]}
	containers := []string{"app", "sidecar"}
	type inst struct {
		started            time.Time
		periods, throttled uint64
	}
	state := map[string]*inst{}
	start := watchtest.After(-time.Hour)
	for _, p := range pods {
		for _, c := range containers {
			state[string(p.UID)+"/"+c] = &inst{started: start}
		}
	}
	watches := []time.Duration{100 * step, 600 * step, 1200 * step} // T0 - t0
	const watchFor = 15 * time.Minute
	rng := rand.New(rand.NewPCG(7, 8))
	deleted := false
	for i := range steps {
		now := watchtest.After(time.Duration(i) * step)
		var batch []healthwatch.CounterSample
		for pi, p := range pods {
			if deleted && pi == 3 {
				continue
			}
			for _, c := range containers {
				s := state[string(p.UID)+"/"+c]
				switch {
				case pi == 1 && c == "app" && i == 700: // a reset within the instance
					s.periods, s.throttled = 0, 0
				case pi == 2 && c == "sidecar" && i == 900: // a restart: a new instance
					compact.Gone(p.UID, c, s.started)
					full.Gone(p.UID, c, s.started)
					s.started, s.periods, s.throttled = now.Add(-500*time.Millisecond), 0, 0
				}
				if rng.IntN(3) == 0 {
					continue // unchanged: the agent sends nothing
				}
				d := uint64(rng.IntN(12))
				s.periods += d
				s.throttled += d * uint64(rng.IntN(3)) / 2
				batch = append(batch, healthwatch.CounterSample{PodUID: p.UID, Container: c, Started: s.started, At: now, Periods: s.periods, Throttled: s.throttled})
			}
		}
		if i%300 == 150 {
			compact.AddOOMKill(pods[i%4].UID, "app", now)
			full.AddOOMKill(pods[i%4].UID, "app", now)
		}
		compact.AddSamples(batch...)
		full.AddSamples(batch...)
		if i == 1500 { // web-4 is deleted after its last samples
			deleted = true
			for _, c := range containers {
				compact.Gone(pods[3].UID, c, start)
				full.Gone(pods[3].UID, c, start)
			}
		}

		for wi, w := range watches {
			from, end := watchtest.After(w+healthwatch.ThrottlingDelay), watchtest.After(w+watchFor)
			if now.Before(from) || now.After(end.Add(time.Minute)) {
				continue
			}
			to := now
			if end.Before(now) {
				to = end
			}
			got, err := compact.ThrottleWindows(podPtrs, containers, from, to)
			require.NoError(t, err)
			want, err := full.ThrottleWindows(podPtrs, containers, from, to)
			require.NoError(t, err)
			require.Equal(t, want, got, "watch %d at step %d", wi, i)
			for _, p := range pods {
				gotN, gotOK := compact.OOMKills(p.UID, "app", watchtest.After(w), to)
				wantN, wantOK := full.OOMKills(p.UID, "app", watchtest.After(w), to)
				require.Equal(t, []any{wantN, wantOK}, []any{gotN, gotOK}, "watch %d at step %d pod %s", wi, i, p.Name)
			}
			if i%20 == 0 {
				in := healthwatch.Input{Change: watchtest.Change(v1alpha1.StrategyRollout, watchtest.CPUDown), Pods: pods[:3], Guardrails: watchtest.Guardrails(nil)}
				in.Change.AppliedAt = metav1.NewTime(watchtest.After(w))
				in.Kernel, in.Throttling = compact, compact
				gotV := healthwatch.Evaluate(now, in)
				in.Kernel, in.Throttling = full, full
				require.Equal(t, healthwatch.Evaluate(now, in), gotV, "watch %d at step %d", wi, i)
			}
		}
	}
	_, _, fullSamples := full.Len()
	pods2, instances, kept := compact.Len()
	assert.Equal(t, 3, pods2, "the deleted pod is dropped")
	assert.Equal(t, 6, instances, "the restarted container's old instance is dropped")
	assert.Less(t, kept, fullSamples/20, "compaction keeps a small part of %d samples", fullSamples)
	t.Logf("kept %d of %d samples", kept, fullSamples)
}

func TestKernelCompactionKeepsTheRecentSamples(t *testing.T) {
	m := NewKernel(WithCompaction(10 * time.Second))
	for i := range 100 {
		m.AddSamples(healthwatch.CounterSample{PodUID: "a", Container: "app", At: watchtest.After(time.Duration(i) * time.Second), Periods: uint64(i)})
	}
	got, err := m.Samples([]types.UID{"a"}, watchtest.After(89*time.Second), watchtest.After(time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, got)
	assert.Equal(t, watchtest.After(89*time.Second), got[0].At, "the sample at a window start within the recent span")
	_, _, kept := m.Len()
	assert.Less(t, kept, 30)
}

// TestKernelKeepsExtremeValuesExactly stores samples at the ends of
// the int64 time and uint64 counter ranges, out of order, replaced and
// with counters that drop, and reads every one back as it was given.
func TestKernelKeepsExtremeValuesExactly(t *testing.T) {
	at := func(ns int64) time.Time { return time.Unix(0, ns).UTC() }
	s := func(ns int64, p, th uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: "a", Container: "app", At: at(ns), Periods: p, Throttled: th}
	}
	tests := []struct {
		name string
		add  [][]healthwatch.CounterSample // calls of AddSamples
		want []healthwatch.CounterSample
	}{
		{
			name: "the ends of the ranges",
			add: [][]healthwatch.CounterSample{{
				s(math.MinInt64, math.MaxUint64, math.MaxUint64), s(-1, 0, 0), s(0, math.MaxUint64, 1),
				s(1, 1, math.MaxUint64), s(math.MaxInt64-1, 0, 0), s(math.MaxInt64, math.MaxUint64, math.MaxUint64),
			}},
			want: []healthwatch.CounterSample{
				s(math.MinInt64, math.MaxUint64, math.MaxUint64), s(-1, 0, 0), s(0, math.MaxUint64, 1),
				s(1, 1, math.MaxUint64), s(math.MaxInt64-1, 0, 0), s(math.MaxInt64, math.MaxUint64, math.MaxUint64),
			},
		},
		{
			name: "out of order, the newest counters of a time win",
			add: [][]healthwatch.CounterSample{
				{s(10e9, 100, 1), s(30e9, 300, 3), s(20e9, 200, 2)},
				{s(30e9, 310, 4)},             // replaces the newest
				{s(20e9, 5, 0), s(5e9, 1, 1)}, // replaces a middle one, and a new oldest
				{s(40e9, 400, 40)},
				{s(40e9, 401, 41), s(40e9, 402, 42)},
			},
			want: []healthwatch.CounterSample{s(5e9, 1, 1), s(10e9, 100, 1), s(20e9, 5, 0), s(30e9, 310, 4), s(40e9, 402, 42)},
		},
		{
			name: "a single sample replaced",
			add:  [][]healthwatch.CounterSample{{s(7, 1, 1)}, {s(7, 2, 2)}, {s(7, math.MaxUint64, 3)}},
			want: []healthwatch.CounterSample{s(7, math.MaxUint64, 3)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewKernel()
			for _, batch := range tt.add {
				m.AddSamples(batch...)
			}
			got, err := m.Samples([]types.UID{"a"}, at(math.MinInt64), at(math.MaxInt64))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			_, _, n := m.Len()
			assert.Equal(t, len(tt.want), n)
		})
	}
}

// TestKernelCompactionMatchesEveryRecentWindow feeds a compacting and
// a keep-everything source the same jittered, gapped, sometimes repeated
// and resetting samples, and asks both, now and then, for windows that
// open anywhere in the recent span, and for the newest sample: the sums
// and the samples read must be the same. Pins expire quickly, so most
// compactions find a pod without pins.
func TestKernelCompactionMatchesEveryRecentWindow(t *testing.T) {
	const recent = 20 * time.Second
	compact := NewKernel(WithCompaction(recent), WithPinTTL(3*time.Second))
	full := NewKernel()
	rng := rand.New(rand.NewPCG(11, 12))
	web1, web2 := watchtest.NewPod("web-1", watchtest.CPUDown), watchtest.NewPod("web-2", watchtest.CPUDown)
	pods := []*corev1.Pod{&web1, &web2}
	containers := []string{"app", "sidecar"}
	type counters struct{ periods, throttled uint64 }
	state := map[string]*counters{}
	now := watchtest.After(0)
	for step := range 3000 {
		now = now.Add(time.Second + time.Duration(rng.IntN(600_000_000)) - 300*time.Millisecond)
		if rng.IntN(50) == 0 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Second) // the agent was away
		}
		var batch []healthwatch.CounterSample
		for _, p := range pods {
			for _, c := range containers {
				k := string(p.UID) + "/" + c
				if state[k] == nil {
					state[k] = &counters{periods: math.MaxUint32 - 50, throttled: 1 << 40}
				}
				st := state[k]
				if rng.IntN(4) == 0 {
					continue
				}
				if rng.IntN(200) == 0 {
					st.periods, st.throttled = 0, 0 // a reset
				}
				d := uint64(rng.IntN(1000))
				st.periods += d
				st.throttled += d / uint64(1+rng.IntN(4))
				batch = append(batch, healthwatch.CounterSample{PodUID: p.UID, Container: c, Started: watchtest.After(-time.Hour), At: now,
					Periods: st.periods, Throttled: st.throttled})
				if rng.IntN(30) == 0 { // sent again with newer counters
					st.periods++
					batch = append(batch, healthwatch.CounterSample{PodUID: p.UID, Container: c, Started: watchtest.After(-time.Hour), At: now,
						Periods: st.periods, Throttled: st.throttled})
				}
			}
		}
		compact.AddSamples(batch...)
		full.AddSamples(batch...)
		if rng.IntN(10) != 0 {
			continue
		}
		from := now.Add(-time.Duration(rng.Int64N(int64(recent))))
		got, err := compact.ThrottleWindows(pods, containers, from, now)
		require.NoError(t, err)
		want, err := full.ThrottleWindows(pods, containers, from, now)
		require.NoError(t, err)
		require.Equal(t, want, got, "window from %s at step %d", from, step)
		gotS, err := compact.Samples([]types.UID{pods[0].UID, pods[1].UID}, now, now)
		require.NoError(t, err)
		wantS, err := full.Samples([]types.UID{pods[0].UID, pods[1].UID}, now, now)
		require.NoError(t, err)
		require.Equal(t, wantS, gotS, "the newest samples at step %d", step)
	}
	_, _, kept := compact.Len()
	_, _, all := full.Len()
	assert.Less(t, kept, all/20, "compaction keeps a small part of %d samples", all)
}

// TestKernelCompactionAfterAGapKeepsTheNewestReplaceable compacts a
// series whose newest sample comes after a gap longer than the recent
// span, then receives that sample again with newer counters.
func TestKernelCompactionAfterAGapKeepsTheNewestReplaceable(t *testing.T) {
	m := NewKernel(WithCompaction(10 * time.Second))
	s := func(at time.Duration, p uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: "a", Container: "app", At: watchtest.After(at), Periods: p, Throttled: p / 2}
	}
	for i := range 6 {
		m.AddSamples(s(time.Duration(i)*time.Second, uint64(10*i)))
	}
	// Irregular steps, so that the newest sample's encoding changes length
	// when it is re-encoded behind the kept one.
	m.AddSamples(s(60*time.Second, 60))
	const gap = 100*time.Second + 12345
	m.AddSamples(s(gap, 1000)) // the eighth sample: compacted
	_, _, n := m.Len()
	require.Equal(t, 2, n, "the newest and the one before the recent span")
	m.AddSamples(s(gap, 1001))
	m.AddSamples(s(gap+time.Second, 1010))

	got, err := m.Samples([]types.UID{"a"}, watchtest.After(-time.Hour), watchtest.After(time.Hour))
	require.NoError(t, err)
	t.Log(got)
	assert.Equal(t, []healthwatch.CounterSample{s(60*time.Second, 60), s(gap, 1001), s(gap+time.Second, 1010)}, got)
}

// TestKernelSumsInPlaceAsCountersDoes: the Kernel's own ThrottleWindows
// (summed in place) and healthwatch.Counters over its samples agree, for
// samples added in any order.
func TestKernelSumsInPlaceAsCountersDoes(t *testing.T) {
	pods, samples := watchtest.ThrottlingFixture(func(pod types.UID, container string, started, at time.Time, periods, throttled uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod, Container: container, Started: started, At: at, Periods: periods, Throttled: throttled}
	})
	containers := []string{"app", "sidecar"}
	from, to := watchtest.After(2*time.Minute), watchtest.After(17*time.Minute+5*time.Second)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	m := NewKernel()
	m.AddSamples(samples...)
	direct, err := m.ThrottleWindows(pods, containers, from, to)
	require.NoError(t, err)
	viaSamples, err := healthwatch.Counters(m).ThrottleWindows(pods, containers, from, to)
	require.NoError(t, err)
	require.Len(t, direct, 2)
	assert.Equal(t, viaSamples, direct)

	// Only the pods and containers asked for.
	one, err := m.ThrottleWindows(pods[:1], []string{"app"}, from, to)
	require.NoError(t, err)
	assert.Len(t, one, 1)
	assert.Less(t, one["app"].Periods, direct["app"].Periods)
}

// TestKernelThrottleWindowsIntoReusesItsRoom: ThrottleWindowsInto writes
// what ThrottleWindows returns into the map it is given, clearing what
// was there, and once that map and the samples' room have grown it
// allocates nothing (the recommender's pass reads every workload's
// throttling each pass).
func TestKernelThrottleWindowsIntoReusesItsRoom(t *testing.T) {
	pods, samples := watchtest.ThrottlingFixture(func(pod types.UID, container string, started, at time.Time, periods, throttled uint64) healthwatch.CounterSample {
		return healthwatch.CounterSample{PodUID: pod, Container: container, Started: started, At: at, Periods: periods, Throttled: throttled}
	})
	from, to := watchtest.After(2*time.Minute), watchtest.After(17*time.Minute+5*time.Second)
	m := NewKernel()
	m.AddSamples(samples...)
	want, err := m.ThrottleWindows(pods, []string{"app", "sidecar"}, from, to)
	require.NoError(t, err)

	out := map[string]healthwatch.ThrottleWindow{"gone": {Periods: 1}}
	m.ThrottleWindowsInto(out, pods, []string{"app", "sidecar"}, from, to)
	assert.Equal(t, want, out, "what ThrottleWindows returns, and nothing left of before")
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		m.ThrottleWindowsInto(out, pods, []string{"app", "sidecar"}, from, to)
	}), "allocations of a call once its room has grown")
	assert.Equal(t, want, out)
}
