package watch

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestMemorySourceSignalsEachPodOnce(t *testing.T) {
	m := NewMemorySource()
	var got []Signal
	cancel := m.OnSignal(func(s Signal) { got = append(got, s) })

	m.AddOOMKill("a", "app", after(time.Minute))
	m.AddSamples(
		CounterSample{PodUID: "a", Container: "app", At: after(time.Second)},
		CounterSample{PodUID: "b", Container: "app", At: after(time.Second)},
		CounterSample{PodUID: "a", Container: "sidecar", At: after(time.Second)},
	)
	assert.Equal(t, []Signal{{"a", SignalOOMKill}, {"a", SignalCounters}, {"b", SignalCounters}}, got)

	cancel()
	m.AddOOMKill("a", "app", after(2*time.Minute))
	assert.Len(t, got, 3, "no signal after cancel")
}

func TestMemorySourceSubscriberMayReadTheSource(t *testing.T) {
	m := NewMemorySource()
	var n int
	var ok bool
	m.OnSignal(func(s Signal) { n, ok = m.OOMKills(s.PodUID, "app", t0, after(time.Hour)) })
	m.AddOOMKill("a", "app", after(time.Minute))
	assert.True(t, ok)
	assert.Equal(t, 1, n, "the kill is stored before subscribers hear of it")
}

func TestMemorySourceOOMKillsInRange(t *testing.T) {
	m := NewMemorySource()
	for _, d := range []time.Duration{-time.Minute, 0, time.Minute, 10 * time.Minute, 10 * time.Minute, 31 * time.Minute} {
		m.AddOOMKill("a", "app", after(d))
	}
	m.AddSamples(CounterSample{PodUID: "a", Container: "sidecar", At: t0})

	tests := []struct {
		name      string
		pod       types.UID
		container string
		from, to  time.Time
		want      int
		known     bool
	}{
		{"(T0, end]", "a", "app", t0, after(30 * time.Minute), 3, true},
		{"the end is inclusive", "a", "app", t0, after(10 * time.Minute), 3, true},
		{"the start is exclusive", "a", "app", after(time.Minute), after(time.Hour), 3, true},
		{"samples make a container known", "a", "sidecar", t0, after(time.Hour), 0, true},
		{"an unknown container", "a", "other", t0, after(time.Hour), 0, false},
		{"an unknown pod", "b", "app", t0, after(time.Hour), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, known := m.OOMKills(tt.pod, tt.container, tt.from, tt.to)
			assert.Equal(t, tt.want, n)
			assert.Equal(t, tt.known, known)
		})
	}
}

func TestMemorySourceSamplesFromTheWindowStart(t *testing.T) {
	m := NewMemorySource()
	s := func(container string, started, at time.Duration, p uint64) CounterSample {
		return CounterSample{PodUID: "a", Container: container, Started: after(started), At: after(at), Periods: p}
	}
	// Out of order, with a duplicate: the newest counters win.
	m.AddSamples(s("app", -time.Hour, 3*time.Minute, 30), s("app", -time.Hour, time.Minute, 10), s("app", -time.Hour, 2*time.Minute, 20),
		s("app", -time.Hour, 4*time.Minute, 40), s("app", -time.Hour, 2*time.Minute, 21))
	m.AddSamples(s("app", 150*time.Second, 3*time.Minute, 5), s("other", -time.Hour, time.Hour, 1))
	m.AddSamples(CounterSample{PodUID: "b", Container: "app", At: after(3 * time.Minute)})

	got, err := m.Samples([]types.UID{"a", "c"}, after(2*time.Minute+time.Second), after(3*time.Minute))
	require.NoError(t, err)
	assert.ElementsMatch(t, []CounterSample{
		s("app", -time.Hour, 2*time.Minute, 21), // the latest at or before from
		s("app", -time.Hour, 3*time.Minute, 30),
		s("app", 150*time.Second, 3*time.Minute, 5),
	}, got)
}

func TestMemorySourcePruneKeepsWindowStart(t *testing.T) {
	m := NewMemorySource()
	for i := range 10 {
		m.AddSamples(CounterSample{PodUID: "a", Container: "app", At: after(time.Duration(i) * time.Minute), Periods: uint64(i)})
	}
	m.AddOOMKill("a", "app", after(time.Minute))
	m.AddOOMKill("a", "app", after(6*time.Minute))
	m.Prune(after(5*time.Minute + time.Second))

	got, err := m.Samples([]types.UID{"a"}, after(5*time.Minute+time.Second), after(time.Hour))
	require.NoError(t, err)
	require.Len(t, got, 5)
	assert.Equal(t, uint64(5), got[0].Periods)
	n, _ := m.OOMKills("a", "app", t0, after(time.Hour))
	assert.Equal(t, 1, n)

	m.ForgetPod("a")
	_, known := m.OOMKills("a", "app", t0, after(time.Hour))
	assert.False(t, known)
}

func TestMemorySourceConcurrentUse(t *testing.T) {
	m := NewMemorySource()
	var wg sync.WaitGroup
	var mu sync.Mutex
	signals := 0
	m.OnSignal(func(Signal) { mu.Lock(); signals++; mu.Unlock() })
	for w := range 4 {
		uid := types.UID([]string{"a", "b", "c", "d"}[w])
		wg.Go(func() {
			for i := range 500 {
				m.AddSamples(CounterSample{PodUID: uid, Container: "app", At: after(time.Duration(i) * time.Second), Periods: uint64(i)})
				if i%100 == 0 {
					m.AddOOMKill(uid, "app", after(time.Duration(i)*time.Second))
				}
			}
		})
		wg.Go(func() {
			for range 100 {
				_, _ = m.Samples([]types.UID{uid}, t0, after(time.Hour))
				_, _ = m.OOMKills(uid, "app", t0, after(time.Hour))
				m.Prune(t0)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 4*(500+5), signals)
	got, err := m.Samples([]types.UID{"a", "b", "c", "d"}, t0, after(time.Hour))
	require.NoError(t, err)
	assert.Len(t, got, 4*500)
}
