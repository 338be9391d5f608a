package healthwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// TestThrottlingBaselinesAreTakenAndContinueTheWindow: the leader that saw
// the window open takes the sample at or before T0+2m as the baseline; a
// leader whose samples start later counts from that baseline, not from
// its own first sample; an instance born in the window needs none.
func TestThrottlingBaselinesAreTakenAndContinueTheWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := t0.Add(ThrottlingDelay)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", UID: "uid-1"}}
	born := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", UID: "uid-2"}}
	sample := func(p *corev1.Pod, started, at time.Time, periods, throttled uint64) CounterSample {
		return CounterSample{PodUID: p.UID, Container: "app", Started: started, At: at, Periods: periods, Throttled: throttled}
	}

	// Leader a: it saw the window open.
	a := newRecorded()
	a.AddSamples(sample(pod, t0, w.Add(-30*time.Second), 50, 5), sample(pod, t0, w.Add(-time.Second), 100, 10),
		sample(pod, t0, w.Add(30*time.Second), 250, 100),
		sample(born, w.Add(10*time.Second), w.Add(20*time.Second), 40, 0))
	win, base, err := windowsWithBaselines(a, []*corev1.Pod{pod, born}, []string{"app"}, w, w.Add(time.Minute), nil)
	require.NoError(t, err)
	assert.Equal(t, ThrottleWindow{Periods: 190, Throttled: 90}, win["app"])
	require.Len(t, base, 1, "the instance born in the window needs none")
	assert.Equal(t, v1alpha1.ThrottlingBaseline{Pod: "web-1", PodUID: "uid-1", Container: "app", Periods: 100, Throttled: 10,
		At: metav1.NewTime(w.Add(-time.Second))}, base[0])

	// Leader b took over at T0+3m: its samples start then.
	b := newRecorded()
	b.AddSamples(sample(pod, t0, t0.Add(3*time.Minute), 300, 150), sample(pod, t0, t0.Add(3*time.Minute+5*time.Second), 420, 160))
	win, again, err := windowsWithBaselines(b, []*corev1.Pod{pod}, []string{"app"}, w, t0.Add(4*time.Minute), base)
	require.NoError(t, err)
	assert.Equal(t, ThrottleWindow{Periods: 320, Throttled: 150}, win["app"], "from the recorded baseline")
	assert.Nil(t, again, "nothing new to record")
	win, _, err = windowsWithBaselines(b, []*corev1.Pod{pod}, []string{"app"}, w, t0.Add(4*time.Minute), nil)
	require.NoError(t, err)
	assert.Equal(t, ThrottleWindow{Periods: 120, Throttled: 10}, win["app"], "without it, from b's first sample")

	// A restarted container (a new instance, counters from zero) does not
	// take the old instance's baseline.
	c := newRecorded()
	c.AddSamples(sample(pod, t0.Add(150*time.Second), t0.Add(3*time.Minute), 30, 3))
	win, _, err = windowsWithBaselines(c, []*corev1.Pod{pod}, []string{"app"}, w, t0.Add(4*time.Minute), base)
	require.NoError(t, err)
	assert.Equal(t, ThrottleWindow{Periods: 30, Throttled: 3}, win["app"], "born in the window: from zero")
}
