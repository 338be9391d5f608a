package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecommendExternalTakesTheTargetThroughTheGuards(t *testing.T) {
	m := proportionalModel(t)
	now := t0.Add(time.Hour)
	cur := Resources{CPUMilli: 1000, MemoryBytes: 1024 * Mi}
	lim := Resources{CPUMilli: 2000, MemoryBytes: 2048 * Mi}
	ext := External{Target: Resources{CPUMilli: 200, MemoryBytes: 300 * Mi},
		Lower: Resources{CPUMilli: 100, MemoryBytes: 200 * Mi}, Upper: Resources{CPUMilli: 400, MemoryBytes: 500 * Mi}}

	t.Run("the target, limits in proportion, bounds as figures", func(t *testing.T) {
		r := m.RecommendExternal(nil, ext, Input{Now: now, Request: cur, Limit: lim})
		require.True(t, r.Ready)
		assert.True(t, r.Changed)
		assert.Equal(t, ext.Target, r.Request)
		assert.Equal(t, Resources{CPUMilli: 400, MemoryBytes: 600 * Mi}, r.Limit)
		assert.Equal(t, Estimate{Target: ext.Target, Lower: ext.Lower, Upper: ext.Upper}, r.Estimate)
		assert.Empty(t, r.Refusals)
	})
	t.Run("no history needed: the source decides when it has a target", func(t *testing.T) {
		r := m.RecommendExternal(&ContainerState{}, ext, Input{Now: now, Request: cur, Limit: lim})
		assert.True(t, r.Ready)
		assert.Equal(t, ext.Target, r.Request)
	})
	t.Run("no target: not ready, current values", func(t *testing.T) {
		r := m.RecommendExternal(nil, External{Lower: ext.Lower}, Input{Now: now, Request: cur, Limit: lim})
		assert.False(t, r.Ready)
		assert.False(t, r.Changed)
		assert.Equal(t, cur, r.Request)
	})
	t.Run("a resource without a target keeps its values", func(t *testing.T) {
		r := m.RecommendExternal(nil, External{Target: Resources{MemoryBytes: 300 * Mi}}, Input{Now: now, Request: cur, Limit: lim})
		require.True(t, r.Ready)
		assert.Equal(t, Resources{CPUMilli: 1000, MemoryBytes: 300 * Mi}, r.Request)
		assert.Equal(t, Resources{CPUMilli: 2000, MemoryBytes: 600 * Mi}, r.Limit)
	})
	t.Run("bounds clamp the target", func(t *testing.T) {
		r := m.RecommendExternal(nil, ext, Input{Now: now, Request: cur, Limit: lim,
			MinAllowed: Resources{CPUMilli: 300}, MaxAllowed: Resources{MemoryBytes: 256 * Mi}})
		assert.Equal(t, Resources{CPUMilli: 300, MemoryBytes: 256 * Mi}, r.Request)
	})
	t.Run("minimum change", func(t *testing.T) {
		r := m.RecommendExternal(nil, External{Target: Resources{CPUMilli: 950, MemoryBytes: 1000 * Mi}}, Input{Now: now, Request: cur, Limit: lim})
		assert.Equal(t, cur, r.Request)
		assert.False(t, r.Changed)
		require.Len(t, r.Refusals, 2)
		assert.Equal(t, ReasonMinChange, r.Refusals[0].Reason)
		assert.Equal(t, ReasonMinChange, r.Refusals[1].Reason)
	})
	t.Run("upscale-only", func(t *testing.T) {
		p := m.Params()
		p.UpscaleOnlyMemory = true
		um, err := NewModel(p)
		require.NoError(t, err)
		r := um.RecommendExternal(nil, ext, Input{Now: now, Request: cur, Limit: lim})
		assert.Equal(t, Resources{CPUMilli: 200, MemoryBytes: 1024 * Mi}, r.Request)
		require.Len(t, r.Refusals, 2)
		assert.Equal(t, ReasonUpscaleOnly, r.Refusals[0].Reason)
	})
	t.Run("cooldown and failedPermanent", func(t *testing.T) {
		r := m.RecommendExternal(nil, ext, Input{Now: now, Request: cur, Limit: lim,
			Holds: Holds{CPUCooldown: true, MemoryFailedPermanent: true}})
		assert.Equal(t, cur, r.Request)
		assert.Equal(t, lim, r.Limit)
		var reasons []Reason
		for _, f := range r.Refusals {
			reasons = append(reasons, f.Reason)
		}
		assert.Equal(t, []Reason{ReasonCooldown, ReasonCooldown, ReasonFailedPermanent, ReasonFailedPermanent}, reasons)
	})
}

func TestRecommendExternalKeepsTheLatches(t *testing.T) {
	m := proportionalModel(t)
	now := t0.Add(time.Hour)
	cur := Resources{CPUMilli: 1000, MemoryBytes: 256 * Mi}
	ext := External{Target: Resources{CPUMilli: 200, MemoryBytes: 100 * Mi}}

	// max(peak + 100Mi, peak × 1.2) with the 15% safety margin, 409.4Mi,
	// in whole mebibytes.
	floor := int64(410 * Mi)
	t.Run("an OOM kill in the state: memory at least max(peak+100Mi, peak*1.2) with the margin", func(t *testing.T) {
		var s ContainerState
		s.RecordOOM(m, 256*Mi, now.Add(-time.Minute))
		r := m.RecommendExternal(&s, ext, Input{Now: now, Request: cur, Limit: cur})
		assert.Equal(t, int64(200), r.Request.CPUMilli, "CPU follows the target")
		assert.Equal(t, floor, r.Request.MemoryBytes, "the source asked for 100Mi")
		assert.Equal(t, floor, r.Limit.MemoryBytes, "never a limit below the request")
		require.NotEmpty(t, r.Refusals)
		f := r.Refusals[0]
		assert.Equal(t, ReasonOOMKill, f.Reason)
		assert.Equal(t, Memory, f.Resource)
		assert.Equal(t, int64(100*Mi), f.Asked, "what the source asked for")
		assert.Equal(t, floor, f.Held)
		assert.Equal(t, float64(256*Mi), f.Observed)
	})
	t.Run("an OOM kill from the caller, no state", func(t *testing.T) {
		r := m.RecommendExternal(nil, ext, Input{Now: now, Request: cur, Limit: cur,
			Signals: Signals{OOMAt: now.Add(-time.Minute), OOMPeakBytes: 256 * Mi}})
		assert.Equal(t, floor, r.Request.MemoryBytes)
	})
	t.Run("throttled in the state: CPU not lowered", func(t *testing.T) {
		var s ContainerState
		s.AddThrottling(m, 0.6, now.Add(-time.Minute))
		r := m.RecommendExternal(&s, ext, Input{Now: now, Request: cur, Limit: cur})
		assert.Equal(t, int64(1000), r.Request.CPUMilli)
		assert.Equal(t, int64(1000), r.Limit.CPUMilli)
		assert.Equal(t, int64(100*Mi), r.Request.MemoryBytes, "memory follows the target")
		require.Len(t, r.Refusals, 2)
		assert.Equal(t, ReasonThrottled, r.Refusals[0].Reason)
		assert.InDelta(t, 0.6, r.Refusals[0].Observed, 1e-6)
	})
}
