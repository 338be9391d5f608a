package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// steady is a state of one instance using cores and memBytes for hours,
// one CPU sample a minute and one memory sample an hour.
func steady(m *Model, cores, memBytes float64, hours int) *ContainerState {
	var s ContainerState
	var w PeakWindow
	for i := 0; i <= hours*60; i++ {
		at := t0.Add(time.Duration(i) * time.Minute)
		s.AddCPU(m, cores, at)
		if i%60 == 0 {
			s.AddMemory(m, &w, memBytes, at)
		}
	}
	return &s
}

func TestEstimateIsPercentileTimesMarginAtLeastTheMinimum(t *testing.T) {
	m := defaultModel(t)
	s := steady(m, 0.5, 1000*Mi, 48)
	e := m.Estimate(s, 1)
	cpuEnd := m.cpu.starts[m.cpu.bucket(0.5)+1]
	memEnd := m.mem.starts[m.mem.bucket(1000*Mi)+1]
	assert.Equal(t, ceil(cpuEnd*1.15*1000), e.Target.CPUMilli)
	assert.Equal(t, ceil(memEnd*1.15), e.Target.MemoryBytes)
	assert.Equal(t, 48*time.Hour, e.History)
	assert.Equal(t, uint32(48*60+1), e.Samples)
	assert.InDelta(t, 2, e.Confidence, 1e-9, "48h at one sample a minute")
	assert.Equal(t, ceil(cpuEnd*1.15*1.5*1000), e.Upper.CPUMilli, "upper × (1 + 1/2)")
	assert.LessOrEqual(t, e.Lower.CPUMilli, e.Target.CPUMilli)

	tiny := steady(m, 0.001, 1*Mi, 48)
	assert.Equal(t, Resources{CPUMilli: 25, MemoryBytes: 250 * Mi}, m.Estimate(tiny, 1).Target, "VPA's pod minimum")
	assert.Equal(t, Resources{CPUMilli: 13, MemoryBytes: 125 * Mi}, m.Estimate(tiny, 2).Target, "shared by two containers")
	assert.Equal(t, Estimate{}, m.Estimate(&ContainerState{}, 1))
}

func TestRecommend(t *testing.T) {
	m := proportionalModel(t)
	now := t0.Add(48 * time.Hour)
	low := steady(m, 0.1, 100*Mi, 48) // far under a 1-core, 1Gi request
	lowCPU := m.Estimate(low, 1).Target.CPUMilli
	lowMem := m.Estimate(low, 1).Target.MemoryBytes
	require.Equal(t, int64(250*Mi), lowMem, "the memory minimum")
	big := Resources{CPUMilli: 1000, MemoryBytes: 1024 * Mi}
	bigLim := Resources{CPUMilli: 2000, MemoryBytes: 2048 * Mi}
	oomAt := t0.Add(40 * time.Hour)

	tests := []struct {
		name     string
		state    *ContainerState
		params   func(*Params)
		in       Input
		ready    bool
		req, lim Resources
		refusals []Refusal
	}{
		{
			name: "a workload far under its request is recommended less, limits in proportion",
			in:   Input{Request: big, Limit: bigLim}, ready: true,
			req: Resources{lowCPU, lowMem}, lim: Resources{2 * lowCPU, 2 * lowMem},
		},
		{
			name:  "no recommendation before MinHistory",
			state: steady(m, 0.1, 100*Mi, 23),
			in:    Input{Request: big, Limit: bigLim}, req: big, lim: bigLim,
		},
		{
			name: "throttling at exactly throttlingRatio holds CPU request and limit",
			in:   Input{Request: big, Limit: bigLim, Signals: Signals{ThrottlingRatio: 0.25}}, ready: true,
			req: Resources{1000, lowMem}, lim: Resources{2000, 2 * lowMem},
			refusals: []Refusal{
				{Resource: CPU, Field: Request, Asked: lowCPU, Held: 1000, Reason: ReasonThrottled, Observed: 0.25, Threshold: 0.25},
				{Resource: CPU, Field: Limit, Asked: 2 * lowCPU, Held: 2000, Reason: ReasonThrottled, Observed: 0.25, Threshold: 0.25},
			},
		},
		{
			name: "throttling just under throttlingRatio does not",
			in:   Input{Request: big, Limit: bigLim, Signals: Signals{ThrottlingRatio: 0.2499}}, ready: true,
			req: Resources{lowCPU, lowMem}, lim: Resources{2 * lowCPU, 2 * lowMem},
		},
		{
			name: "an OOM kill holds memory at its current value",
			in:   Input{Request: big, Signals: Signals{OOMAt: oomAt, OOMPeakBytes: 300 * Mi}}, ready: true,
			req: Resources{lowCPU, 1024 * Mi},
			refusals: []Refusal{
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 1024 * Mi, Reason: ReasonOOMKill, Observed: 300 * Mi, Threshold: 460 * Mi, At: oomAt},
			},
		},
		{
			name: "after an OOM kill memory is at least (peak + 100Mi) × the margin",
			in: Input{Request: Resources{1000, 300 * Mi}, Limit: Resources{0, 600 * Mi},
				Signals: Signals{OOMAt: oomAt, OOMPeakBytes: 300 * Mi}}, ready: true,
			req: Resources{lowCPU, 460 * Mi}, lim: Resources{0, 920 * Mi},
			refusals: []Refusal{
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 460 * Mi, Reason: ReasonOOMKill, Observed: 300 * Mi, Threshold: 460 * Mi, At: oomAt},
				{Resource: Memory, Field: Limit, Asked: 2 * lowMem, Held: 920 * Mi, Reason: ReasonOOMKill, Observed: 300 * Mi, Threshold: 460 * Mi, At: oomAt},
			},
		},
		{
			name: "after an OOM kill of a large peak memory is at least peak × 1.2 × the margin",
			in:   Input{Request: Resources{1000, 1000 * Mi}, Signals: Signals{OOMAt: oomAt, OOMPeakBytes: 1000 * Mi}}, ready: true,
			req: Resources{lowCPU, 1380 * Mi},
			refusals: []Refusal{
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 1380 * Mi, Reason: ReasonOOMKill, Observed: 1000 * Mi, Threshold: 1380 * Mi, At: oomAt},
			},
		},
		{
			name: "the OOM bump stops at maxAllowed",
			in: Input{Request: Resources{1000, 300 * Mi}, MaxAllowed: Resources{0, 350 * Mi},
				Signals: Signals{OOMAt: oomAt, OOMPeakBytes: 300 * Mi}}, ready: true,
			req: Resources{lowCPU, 350 * Mi},
			refusals: []Refusal{
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 350 * Mi, Reason: ReasonOOMKill, Observed: 300 * Mi, Threshold: 350 * Mi, At: oomAt},
			},
		},
		{
			name: "cooldown and failedPermanent hold their resources",
			in:   Input{Request: big, Holds: Holds{CPUCooldown: true, MemoryFailedPermanent: true}}, ready: true,
			req: big,
			refusals: []Refusal{
				{Resource: CPU, Field: Request, Asked: lowCPU, Held: 1000, Reason: ReasonCooldown, Observed: 1000},
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 1024 * Mi, Reason: ReasonFailedPermanent, Observed: 1024 * Mi},
			},
		},
		{
			name:   "upscale-only refuses a decrease",
			params: func(p *Params) { p.UpscaleOnlyMemory = true },
			in:     Input{Request: big}, ready: true,
			req: Resources{lowCPU, 1024 * Mi},
			refusals: []Refusal{
				{Resource: Memory, Field: Request, Asked: lowMem, Held: 1024 * Mi, Reason: ReasonUpscaleOnly, Observed: 1024 * Mi},
			},
		},
		{
			name:   "upscale-only lets an increase through",
			params: func(p *Params) { p.UpscaleOnlyCPU = true },
			in:     Input{Request: Resources{10, 100 * Mi}}, ready: true,
			req: Resources{lowCPU, lowMem},
		},
		{
			name: "an increase of exactly MinChange is made",
			in:   Input{Request: Resources{1000, lowMem}, MinAllowed: Resources{1100, 0}, MaxAllowed: Resources{1100, 0}}, ready: true,
			req: Resources{1100, lowMem},
		},
		{
			name: "an increase just under MinChange is not",
			in:   Input{Request: Resources{1000, lowMem}, MinAllowed: Resources{1099, 0}, MaxAllowed: Resources{1099, 0}}, ready: true,
			req: Resources{1000, lowMem},
			refusals: []Refusal{
				{Resource: CPU, Field: Request, Asked: 1099, Held: 1000, Reason: ReasonMinChange, Observed: 1000, Threshold: 0.1},
			},
		},
		{
			name: "a decrease of exactly MinChange is made",
			in:   Input{Request: Resources{1000, lowMem}, MinAllowed: Resources{900, 0}, MaxAllowed: Resources{900, 0}}, ready: true,
			req: Resources{900, lowMem},
		},
		{
			name: "a decrease just under MinChange is not",
			in:   Input{Request: Resources{1000, lowMem}, MinAllowed: Resources{901, 0}, MaxAllowed: Resources{901, 0}}, ready: true,
			req: Resources{1000, lowMem},
			refusals: []Refusal{
				{Resource: CPU, Field: Request, Asked: 901, Held: 1000, Reason: ReasonMinChange, Observed: 1000, Threshold: 0.1},
			},
		},
		{
			name: "minAllowed raises and maxAllowed caps the request",
			in:   Input{Request: big, MinAllowed: Resources{500, 0}, MaxAllowed: Resources{0, 200 * Mi}}, ready: true,
			req: Resources{500, 200 * Mi},
		},
		{
			name: "limits in proportion round up",
			in:   Input{Request: Resources{100, lowMem}, Limit: Resources{150, 0}, MinAllowed: Resources{301, 0}}, ready: true,
			req: Resources{301, lowMem}, lim: Resources{452, 0},
		},
		{
			name:   "without proportion a limit stays, but never below the request",
			params: func(p *Params) { p.KeepLimitProportion = false },
			in:     Input{Request: Resources{100, lowMem}, Limit: Resources{200, 2048 * Mi}, MinAllowed: Resources{300, 0}}, ready: true,
			req: Resources{300, lowMem}, lim: Resources{300, 2048 * Mi},
		},
		{
			name:  "a resource with no samples keeps its values",
			state: func() *ContainerState { s := steady(m, 0.1, 0, 48); s.Memory = Histogram{}; return s }(),
			in:    Input{Request: big, Limit: bigLim}, ready: true,
			req: Resources{lowCPU, 1024 * Mi}, lim: Resources{2 * lowCPU, 2048 * Mi},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := m
			if tt.params != nil {
				p := m.Params()
				tt.params(&p)
				var err error
				model, err = NewModel(p)
				require.NoError(t, err)
			}
			state := tt.state
			if state == nil {
				state = low
			}
			tt.in.Now = now
			r := model.Recommend(state, tt.in)
			assert.Equal(t, tt.ready, r.Ready, "ready")
			assert.Equal(t, tt.req, r.Request, "request")
			assert.Equal(t, tt.lim, r.Limit, "limit")
			assert.Equal(t, tt.refusals, r.Refusals, "refusals")
			assert.Equal(t, r.Request != tt.in.Request || r.Limit != tt.in.Limit, r.Changed)
			assert.True(t, r.Limit.CPUMilli == 0 || r.Limit.CPUMilli >= r.Request.CPUMilli, "never a CPU limit below a request")
			assert.True(t, r.Limit.MemoryBytes == 0 || r.Limit.MemoryBytes >= r.Request.MemoryBytes, "never a memory limit below a request")
		})
	}
}

// TestRecommendKeepsLimitsByDefaultButAGuaranteedPodsFollow checks the
// default limits rule: a request goes down and its limit stays, as VPA's
// controlledValues RequestsOnly; in a Guaranteed pod the limit follows
// the request, so the pod stays Guaranteed.
func TestRecommendKeepsLimitsByDefaultButAGuaranteedPodsFollow(t *testing.T) {
	m := defaultModel(t)
	require.False(t, m.Params().KeepLimitProportion, "the default")
	s := steady(m, 0.1, 100*Mi, 48)
	target := m.Estimate(s, 1).Target
	now := t0.Add(48 * time.Hour)
	tests := []struct {
		name     string
		in       Input
		req, lim Resources
	}{
		{
			name: "burstable: the requests go down, the limits stay",
			in:   Input{Request: Resources{1000, 1024 * Mi}, Limit: Resources{2000, 1024 * Mi}},
			req:  target, lim: Resources{2000, 1024 * Mi},
		},
		{
			name: "guaranteed: the limits follow the requests",
			in:   Input{Request: Resources{1000, 1024 * Mi}, Limit: Resources{1000, 1024 * Mi}, Guaranteed: true},
			req:  target, lim: target,
		},
		{
			name: "no limit stays none",
			in:   Input{Request: Resources{1000, 1024 * Mi}},
			req:  target,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			r := m.Recommend(s, tt.in)
			require.True(t, r.Ready)
			assert.Equal(t, tt.req, r.Request, "request")
			assert.Equal(t, tt.lim, r.Limit, "limit")
			assert.Empty(t, r.Refusals)
		})
	}
}

// TestAnOOMKillUnderALoweredLimitRestoresTheManifestsMemory checks the
// OOM latch's manifest floor: a kill under a memory limit below the
// manifest's brings memory back to at least the manifest's values, not
// to a bump from the killed value, which a step in load kills again.
func TestAnOOMKillUnderALoweredLimitRestoresTheManifestsMemory(t *testing.T) {
	m := proportionalModel(t)
	now := t0.Add(48 * time.Hour)
	lowered := Resources{CPUMilli: 250, MemoryBytes: 363 * Mi}
	manifest := Resources{CPUMilli: 1000, MemoryBytes: 1024 * Mi}
	// The bump from the 363Mi the kill happened at: max(463Mi, 435.6Mi) × 1.15.
	bump := int64(533 * Mi)
	tests := []struct {
		name             string
		limit            Resources
		manifestLimit    Resources
		maxAllowed       int64
		guaranteed       bool
		wantReq, wantLim int64
	}{
		{name: "under a lowered limit: the manifest's memory", limit: lowered, manifestLimit: manifest,
			wantReq: 1024 * Mi, wantLim: 1024 * Mi},
		{name: "no manifest known: the bump", limit: lowered,
			wantReq: bump, wantLim: bump},
		{name: "under the manifest's own limit: the bump", limit: lowered, manifestLimit: Resources{MemoryBytes: 363 * Mi},
			wantReq: bump, wantLim: bump},
		{name: "maxAllowed caps the request, not the limit", limit: lowered, manifestLimit: manifest, maxAllowed: 800 * Mi,
			wantReq: 800 * Mi, wantLim: 1024 * Mi},
		{name: "in a Guaranteed pod maxAllowed caps both: they stay equal", limit: lowered, manifestLimit: manifest, maxAllowed: 800 * Mi,
			guaranteed: true, wantReq: 800 * Mi, wantLim: 800 * Mi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := steady(m, 0.2, 300*Mi, 48)
			s.RecordOOM(m, 363*Mi, now.Add(-time.Minute))
			in := Input{Now: now, Request: lowered, Limit: tt.limit,
				ManifestRequest: manifest, ManifestLimit: tt.manifestLimit, MaxAllowed: Resources{MemoryBytes: tt.maxAllowed}, Guaranteed: tt.guaranteed}
			r := m.Recommend(s, in)
			require.True(t, r.Ready)
			assert.Equal(t, tt.wantReq, r.Request.MemoryBytes, "memory request %dMi", r.Request.MemoryBytes/Mi)
			assert.Equal(t, tt.wantLim, r.Limit.MemoryBytes, "memory limit %dMi", r.Limit.MemoryBytes/Mi)
		})
	}
}

func TestRecommendUsesTheStatesSignals(t *testing.T) {
	m := defaultModel(t)
	s := steady(m, 0.1, 100*Mi, 48)
	s.AddThrottling(m, 0.5, t0.Add(time.Hour))
	s.RecordOOM(m, 300*Mi, t0.Add(2*time.Hour))
	now := t0.Add(48 * time.Hour)
	in := Input{Now: now, Request: Resources{1000, 1024 * Mi}} // the state's own signals are used
	r := m.Recommend(s, in)
	assert.Equal(t, in.Request, r.Request)
	require.Len(t, r.Refusals, 2)
	assert.Equal(t, ReasonThrottled, r.Refusals[0].Reason)
	assert.Equal(t, ReasonOOMKill, r.Refusals[1].Reason)
	assert.Equal(t, "memory request held at 1024Mi instead of 250Mi: OOMKill at 2026-11-01T02:00:00Z (peak 300Mi, floor 460Mi)", r.Refusals[1].String())
}

func TestParamsValidateNamesTheField(t *testing.T) {
	require.NoError(t, DefaultParams().Validate())
	tests := []struct {
		field  string
		mutate func(*Params)
	}{
		{"CPUFirstBucket", func(p *Params) { p.CPUFirstBucket = 0 }},
		{"MemoryMaxValue", func(p *Params) { p.MemoryMaxValue = -1 }},
		{"BucketGrowth", func(p *Params) { p.BucketGrowth = 0.01 }}, // 900+ buckets
		{"Epsilon", func(p *Params) { p.Epsilon = 1 }},
		{"CPUHalfLife", func(p *Params) { p.CPUHalfLife = time.Second }},
		{"MemoryInterval", func(p *Params) { p.MemoryInterval = 0 }},
		{"MemoryIntervals", func(p *Params) { p.MemoryIntervals = 0 }},
		{"CPUPercentile", func(p *Params) { p.CPUPercentile = 1.5 }},
		{"MemoryPercentile", func(p *Params) { p.MemoryPercentile = 0 }},
		{"SafetyMargin", func(p *Params) { p.SafetyMargin = -0.1 }},
		{"ConfidenceInterval", func(p *Params) { p.ConfidenceInterval = 0 }},
		{"MinCPUMilli", func(p *Params) { p.MinCPUMilli = -1 }},
		{"MinHistory", func(p *Params) { p.MinHistory = -time.Second }},
		{"MinChange", func(p *Params) { p.MinChange = 1 }},
		{"ThrottlingRatio", func(p *Params) { p.ThrottlingRatio = 0 }},
		{"OOMBumpRatio", func(p *Params) { p.OOMBumpRatio = 0.9 }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			p := DefaultParams()
			tt.mutate(&p)
			err := p.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.field+": must be")
			_, err = NewModel(p)
			assert.ErrorContains(t, err, tt.field)
		})
	}
}

func TestRecommendAllocatesOnlyForRefusals(t *testing.T) {
	m := proportionalModel(t)
	s := steady(m, 0.1, 100*Mi, 48)
	in := Input{Now: t0.Add(48 * time.Hour), Request: Resources{1000, 1024 * Mi}, Limit: Resources{2000, 2048 * Mi}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { m.Recommend(s, in) }))
	in.Holds.CPUCooldown = true
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { m.Recommend(s, in) }), "the refusals' slice, grown for request and limit")
}
