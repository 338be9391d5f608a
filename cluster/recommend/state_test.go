package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryKeepsOnePeakPerInstancePerInterval(t *testing.T) {
	m := defaultModel(t)
	var s ContainerState
	var a, b PeakWindow
	s.AddMemory(m, &a, 100*Mi, t0)
	s.AddMemory(m, &a, 300*Mi, t0.Add(time.Hour))
	s.AddMemory(m, &a, 200*Mi, t0.Add(2*time.Hour))
	require.InDelta(t, 1, s.Memory.total(), 1e-6, "one peak in the first interval")
	assert.Equal(t, m.mem.starts[m.mem.bucket(300*Mi)+1], s.Memory.percentile(&m.mem, 1))

	s.AddMemory(m, &b, 50*Mi, t0) // another instance: its own peak
	assert.InDelta(t, 2, s.Memory.total(), 1e-6)

	s.AddMemory(m, &a, 150*Mi, t0.Add(25*time.Hour)) // next interval of a
	assert.Equal(t, t0.Add(48*time.Hour).Unix(), a.end)
	assert.InDelta(t, 2+2, s.Memory.total(), 1e-5, "the new peak is stamped a half-life later: weight 2")

	s.AddMemory(m, &a, 10*Mi, t0.Add(5*24*time.Hour)) // skips intervals, lands in the one ending at day 6
	assert.Equal(t, t0.Add(6*24*time.Hour).Unix(), a.end)
}

func TestOOMLatchInputHoldsForTheWindow(t *testing.T) {
	m := defaultModel(t)
	window := m.Params().Window()
	var s ContainerState
	s.RecordOOM(m, 300*Mi, t0)
	s.RecordOOM(m, 200*Mi, t0.Add(time.Hour))
	tests := []struct {
		name string
		now  time.Time
		at   time.Time
		peak float64
	}{
		{"just after", t0.Add(2 * time.Hour), t0.Add(time.Hour), 300 * Mi},
		{"one second before the window ends", t0.Add(time.Hour + window - time.Second), t0.Add(time.Hour), 300 * Mi},
		{"at the window's end", t0.Add(time.Hour + window), time.Time{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := s.Signals(m, tt.now)
			assert.Equal(t, tt.at, sig.OOMAt)
			assert.Equal(t, tt.peak, sig.OOMPeakBytes)
		})
	}
	s.RecordOOM(m, 100*Mi, t0.Add(window+2*time.Hour)) // the old kills left the window
	assert.Equal(t, 100.0*Mi, s.Signals(m, t0.Add(window+3*time.Hour)).OOMPeakBytes)
}

func TestThrottlingMaximaCoverTheWholeWindow(t *testing.T) {
	m := defaultModel(t)
	day := 24 * time.Hour
	var s ContainerState
	s.AddThrottling(m, 0, t0) // zero ratios allocate nothing
	assert.Nil(t, s.thr)
	s.AddThrottling(m, 0.3, t0.Add(time.Hour))
	s.AddThrottling(m, 0.1, t0.Add(2*day))
	tests := []struct {
		name string
		now  time.Time
		want float64
	}{
		{"same day", t0.Add(2 * time.Hour), float64(float32(0.3))},
		{"eight days later, the day is still in the window", t0.Add(8*day + 23*time.Hour), float64(float32(0.3))},
		{"nine days later it is not", t0.Add(9 * day), float64(float32(0.1))},
		{"eleven days later nothing is", t0.Add(11 * day), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, s.Signals(m, tt.now).ThrottlingRatio)
		})
	}
	s.AddThrottling(m, 0.05, t0.Add(30*day)) // far ahead: the ring is cleared
	assert.Equal(t, float64(float32(0.05)), s.Signals(m, t0.Add(30*day)).ThrottlingRatio)
	s.AddThrottling(m, 0.9, t0) // older than the ring: ignored
	assert.Equal(t, float64(float32(0.05)), s.Signals(m, t0.Add(30*day)).ThrottlingRatio)
}

func TestCPUHistoryAndSamples(t *testing.T) {
	m := defaultModel(t)
	var s ContainerState
	s.AddCPU(m, 0.5, t0.Add(time.Hour))
	s.AddCPU(m, 0.5, t0)
	s.AddCPU(m, 0.5, t0.Add(3*time.Hour))
	assert.Equal(t, 3*time.Hour, s.History())
	assert.Equal(t, uint32(3), s.Samples())
}

func TestSignalsAtZeroTimeFailSafe(t *testing.T) {
	m := defaultModel(t)
	var s ContainerState
	s.RecordOOM(m, 300*Mi, t0)
	s.AddThrottling(m, 0.5, t0)
	sig := s.Signals(m, time.Time{})
	assert.Equal(t, 300.0*Mi, sig.OOMPeakBytes, "an unset clock keeps the OOM latch")
	assert.Equal(t, 0.5, sig.ThrottlingRatio, "and the throttling latch")
}
