package quality

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cluster/signals"
)

func TestOOMKillHappensOnlyAboveTheLimit(t *testing.T) {
	assert.False(t, OOMKill(100*Mi, 100*Mi), "at the limit the kernel reclaims, it does not kill")
	assert.True(t, OOMKill(100*Mi+1, 100*Mi))
	assert.False(t, OOMKill(1<<40, 0), "no limit, no kill")

	tr := &Trace{Name: "t", Step: time.Minute, Samples: []Sample{
		{Memory: 100 * Mi}, {Memory: 100*Mi + 1}, {Memory: 50 * Mi}, {Memory: 50 * Mi},
	}}
	require.NoError(t, tr.Validate())
	k := NewKernel(tr)
	v := Values{MemoryLimit: 100 * Mi}
	var got []Outcome
	for i := range tr.Samples {
		got = append(got, k.Run(i, v))
	}
	assert.False(t, got[0].OOMKilled)
	assert.True(t, got[1].OOMKilled)
	assert.Equal(t, float64(100*Mi), got[1].Memory, "a killed container's working set reads as its limit")
	assert.Equal(t, float64(100*Mi+1), got[1].Wanted)
	assert.False(t, got[2].Running, "the kubelet's first crash-loop back-off (10 s) takes the next sample")
	assert.True(t, got[3].Running)
	assert.False(t, got[3].OOMKilled)
}

func TestMemoryFollowsAgeAfterAKillWhenTheTraceSaysSo(t *testing.T) {
	mem := []float64{10 * Mi, 20 * Mi, 300 * Mi, 40 * Mi, 50 * Mi, 60 * Mi}
	for _, byAge := range []bool{false, true} {
		tr := &Trace{Name: "t", Step: time.Minute, MemoryByAge: byAge}
		for _, m := range mem {
			tr.Samples = append(tr.Samples, Sample{Memory: m})
		}
		k := NewKernel(tr)
		var got []float64
		for i := range tr.Samples {
			got = append(got, k.Run(i, Values{MemoryLimit: 100 * Mi}).Wanted)
		}
		if byAge {
			assert.Equal(t, []float64{10 * Mi, 20 * Mi, 300 * Mi, 0, 10 * Mi, 20 * Mi}, got, "after the kill at sample 2 and a sample of back-off, the trace starts over")
		} else {
			assert.Equal(t, []float64{10 * Mi, 20 * Mi, 300 * Mi, 0, 50 * Mi, 60 * Mi}, got, "after the back-off, memory goes on as recorded")
		}
	}
}

func TestThrottledPeriodsComeFromPerPeriodDemand(t *testing.T) {
	// 20 % of the periods at 0.3 cores, the rest at 0.05: a mean of 0.1.
	s := Sample{CPU: 0.2*0.3 + 0.8*0.05, Burst: 0.2, BurstCPU: 0.3}
	require.InDelta(t, 0.05, s.BaseCPU(), 1e-12)
	for _, tc := range []struct {
		name               string
		limit              int64
		periods, throttled int
		cpu                float64
	}{
		{"no limit: no quota, no periods", 0, 0, 0, 0.1},
		{"a limit above every period's demand", 300, 600, 0, 0.1},
		{"a limit above the mean but below the bursts", 250, 600, 120, (480*0.05 + 120*0.25) / 600},
		{"a limit below the base demand", 40, 600, 600, 0.04},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpu, periods, throttled := Throttling(s, time.Minute, tc.limit)
			assert.Equal(t, tc.periods, periods)
			assert.Equal(t, tc.throttled, throttled)
			assert.InDelta(t, tc.cpu, cpu, 1e-12)
		})
	}
}

func TestTracesAreDeterministicBySeed(t *testing.T) {
	a, b := Generate("diurnal", 0, 2*day), Generate("diurnal", 0, 2*day)
	require.NotNil(t, a)
	assert.Equal(t, a, b)
	c := Generate("diurnal", 99, 2*day)
	assert.NotEqual(t, a.Samples, c.Samples)
	assert.Equal(t, uint64(99), c.Seed)

	names := map[string]bool{}
	for _, tr := range Library(time.Hour) {
		require.NoError(t, tr.Validate())
		assert.False(t, names[tr.Name], "names are unique: %s", tr.Name)
		names[tr.Name] = true
		assert.NotEmpty(t, tr.About)
		assert.Len(t, tr.Samples, 60)
	}
	assert.Len(t, names, 9)
}

func TestTraceFormatRoundTrips(t *testing.T) {
	tr := Generate("jvm", 0, 3*time.Hour)
	var buf bytes.Buffer
	require.NoError(t, WriteTrace(&buf, tr))
	raw := buf.Bytes()
	got, err := ReadTrace(bytes.NewReader(raw))
	require.NoError(t, err)
	assert.Equal(t, tr, got)

	// make bench-quality's KERF_QUALITY_TRACES: every *.csv of a directory.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "jvm.csv"), raw, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a trace"), 0o600))
	all, err := ReadTraces(dir)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, tr, all[0])
}

func TestTraceFormatRefusesBadInputNamingTheField(t *testing.T) {
	head := "# kerf-trace: 1\n# name: x\n# step: 1m\n"
	rows := "index,cpu_cores,burst,burst_cpu_cores,memory_bytes\n"
	for _, tc := range []struct{ in, field string }{
		{"# kerf-trace: 2\n# name: x\n# step: 1m\n" + rows + "0,1,0,0,1\n", "kerf-trace: version"},
		{"# name: x\n# step: 1m\n" + rows + "0,1,0,0,1\n", "header kerf-trace: missing"},
		{"# kerf-trace: 1\n# name: x\n# step: 1s5ms\n" + rows + "0,1,0,0,1\n", "step: must be a whole number of 100ms periods"},
		{head + "# colour: red\n" + rows, "colour: unknown header"},
		{head + "# cpu_limit_millicores: -1\n" + rows, "cpu_limit_millicores: must be a whole number"},
		{head + rows + "0,-1,0,0,1\n", "line 5: cpu: must be in"},
		{head + rows + "0,1,1,0,1\n", "burst: must be in [0, 1)"},
		{head + rows + "0,0.1,0.5,1,1\n", "burst_cpu: burst × burst_cpu"},
		{head + rows + "0,1,0,0,x\n", "memory_bytes: not a number"},
		{head + rows + "1,1,0,0,1\n", "index: want 0"},
		{head + rows, "samples: none"},
		{head + "a,b\n", "the header row"},
	} {
		_, err := ReadTrace(strings.NewReader(tc.in))
		if assert.Error(t, err, tc.field) {
			assert.Contains(t, err.Error(), tc.field)
		}
	}
}

func TestEveryStrategyIsSensibleOnASteadyTrace(t *testing.T) {
	minute := Generate("steady", 0, 4*day)
	// The same usage as a recorded trace at the agent's 10 s would be.
	tenSeconds := *minute
	tenSeconds.Name, tenSeconds.Step, tenSeconds.Samples = "steady-10s", 10*time.Second, nil
	for _, s := range minute.Samples {
		for range 6 {
			tenSeconds.Samples = append(tenSeconds.Samples, s)
		}
	}
	for _, tr := range []*Trace{minute, &tenSeconds} {
		strategies, err := Strategies()
		require.NoError(t, err)
		for _, s := range strategies {
			t.Run(tr.Name+"/"+s.Name(), func(t *testing.T) {
				r, err := Replay(tr, s, true)
				require.NoError(t, err)
				assert.Zero(t, r.OOMKills)
				assert.Zero(t, r.Rollbacks)
				assert.Zero(t, r.Throttled)
				last := r.Values[len(r.Values)-1]
				if s.Name() == "manual" {
					assert.Equal(t, tr.Manifest, last)
					assert.Zero(t, r.Changes)
					return
				}
				// 0.3 cores and 300 Mi: a request at least the usage and at most
				// twice it, and fewer changes than days.
				assert.GreaterOrEqual(t, r.Changes, 1)
				assert.LessOrEqual(t, r.Changes, 4)
				assert.InDelta(t, 450, last.CPURequest, 150, "cpu request %s", last)
				assert.InDelta(t, 450*Mi, last.MemoryRequest, 150*Mi, "memory request %s", last)
				assert.Less(t, r.CPUSlack, 0.5*r.CPUUsage)
			})
		}
	}
}

// TestKerfKeepsTheCPULimitSoBurstsAreNotThrottled is the default limits
// rule in the replay: on the bursty trace VPA's in-place target scales
// the limit down and throttles a third of the periods, while Kerf lowers
// the request only and its 500m limit lets the 0.3-core bursts run.
func TestKerfKeepsTheCPULimitSoBurstsAreNotThrottled(t *testing.T) {
	tr := Generate("bursty", 0, 4*day)
	k, err := NewKerf()
	require.NoError(t, err)
	kr, err := Replay(tr, k, true)
	require.NoError(t, err)
	vr, err := Replay(tr, NewVPA(), false)
	require.NoError(t, err)
	assert.Greater(t, vr.ThrottledRatio(), 0.2)
	assert.Zero(t, kr.Rollbacks)
	assert.Zero(t, kr.Throttled)
	last := kr.Values[len(kr.Values)-1]
	assert.Less(t, last.CPURequest, tr.Manifest.CPURequest, "the request is lowered: %s", last)
	assert.Equal(t, tr.Manifest.CPULimit, last.CPULimit, "the limit stays: %s", last)
}

// TestKerfIsNotOOMKilledByAStepAboveItsLoweredRequest is the default
// limits rule on the step trace: memory steps from 300 Mi to 700 Mi on
// day 10, above the lowered request but under the manifest's 1 Gi limit
// that Kerf keeps, so no kill and no rollback.
func TestKerfIsNotOOMKilledByAStepAboveItsLoweredRequest(t *testing.T) {
	tr := Generate("step", 0, 0)
	k, err := NewKerf()
	require.NoError(t, err)
	r, err := Replay(tr, k, true)
	require.NoError(t, err)
	assert.Zero(t, r.OOMKills)
	assert.Zero(t, r.Rollbacks)
	lowest := tr.Manifest.MemoryRequest
	for _, v := range r.Values {
		lowest = min(lowest, v.MemoryRequest)
		assert.Equal(t, tr.Manifest.MemoryLimit, v.MemoryLimit, "the memory limit stays: %s", v)
	}
	assert.Less(t, lowest, tr.Manifest.MemoryRequest/2, "the memory request was lowered")
}

// TestKerfWithScaledLimitsIsOOMKilledOnceByAStep is the OOM latch's
// manifest floor and the recommender's answer at once, where the memory
// limit went down with the request (a Guaranteed pod's path): the first
// kill of the step brings memory back to the manifest's 1 Gi, so the
// step costs one kill and no rollback.
func TestKerfWithScaledLimitsIsOOMKilledOnceByAStep(t *testing.T) {
	tr := Generate("step", 0, 0)
	k, err := NewKerfScaledLimits()
	require.NoError(t, err)
	r, err := Replay(tr, k, true)
	require.NoError(t, err)
	assert.Equal(t, 1, r.OOMKills)
	assert.Zero(t, r.Rollbacks)
	lowest := tr.Manifest.MemoryLimit
	for _, v := range r.Values {
		lowest = min(lowest, v.MemoryLimit)
	}
	assert.Less(t, lowest, tr.Manifest.MemoryLimit/2, "the memory limit was lowered before the step")
}

// TestKerfRollsBackAChangeThatThrottles is the health watch in the
// replay with keepLimitProportion: on the bursty trace the limit scaled
// with the request throttles, the watch rolls the change back and the
// cooldown holds.
func TestKerfRollsBackAChangeThatThrottles(t *testing.T) {
	tr := Generate("bursty", 0, 4*day)
	k, err := NewKerfScaledLimits()
	require.NoError(t, err)
	kr, err := Replay(tr, k, false)
	require.NoError(t, err)
	assert.Equal(t, 1, kr.Rollbacks)
	assert.Less(t, kr.ThrottledRatio(), 0.01)
}

// TestKerfRollsBackAChangeThatOOMKills is the health watch's OOM rule
// and the cooldown, with keepLimitProportion: an OOM kill in the watch
// of a decrease restores the previous memory, and no decrease follows
// (the cooldown and the backoff's failedPermanent both hold it).
func TestKerfRollsBackAChangeThatOOMKills(t *testing.T) {
	tr := Generate("steady", 0, 2*day)
	k, err := NewKerfScaledLimits()
	require.NoError(t, err)
	k.Start(tr.Manifest, Epoch)
	kern := NewKernel(tr)
	v := tr.Manifest
	at := func(i int) time.Time { return Epoch.Add(time.Duration(i+1) * tr.Step) }
	i := 0
	for ; i < len(tr.Samples); i++ {
		next, a := k.Step(Observation{At: at(i), Values: v, Outcome: kern.Run(i, v)})
		v = next
		if a == Changed {
			break
		}
	}
	require.Less(t, v.MemoryLimit, tr.Manifest.MemoryLimit, "a decrease after a day of history")
	before := v
	i++
	next, a := k.Step(Observation{At: at(i), Values: v, Outcome: Outcome{Running: true, OOMKilled: true, Memory: float64(v.MemoryLimit), Wanted: float64(v.MemoryLimit) + 1}})
	require.Equal(t, RolledBack, a)
	assert.Equal(t, tr.Manifest.MemoryLimit, next.MemoryLimit, "memory restored")
	assert.Equal(t, tr.Manifest.MemoryRequest, next.MemoryRequest)
	assert.Equal(t, before.CPURequest, next.CPURequest, "CPU was not breached and keeps its change")
	v = next
	for i++; i < len(tr.Samples); i++ {
		next, _ := k.Step(Observation{At: at(i), Values: v, Outcome: kern.Run(i, v)})
		assert.GreaterOrEqual(t, next.MemoryRequest, tr.Manifest.MemoryRequest, "no memory decrease in the cooldown")
		v = next
	}
}

func TestPlotDrawsEveryStrategy(t *testing.T) {
	tr := Generate(PlotTrace, 0, 2*day)
	per, _, err := Run([]*Trace{tr}, PlotTrace)
	require.NoError(t, err)
	svg, err := Plot(tr, per[0])
	require.NoError(t, err)
	for _, name := range []string{"Kerf", "VPA", "KRR p95", "manual", "Kerf, limits scaled"} {
		assert.Contains(t, string(svg), ">"+name+"<")
	}
	assert.Equal(t, 1+2*2*5, strings.Count(string(svg), "<polyline")-1, "demand and each strategy's request and limit per panel")
}

func TestRecorderMakesATraceFromTheAgentsReadings(t *testing.T) {
	r := NewRecorder("recorded", "a test workload", Epoch, time.Minute, Values{CPURequest: 100, CPULimit: 200})
	// 0.5 cores and 100 Mi in the first minute, 0.25 cores and 200 Mi in
	// the second, read every 10 s; half the second minute's periods
	// throttled under the 200m limit.
	for i := 0; i <= 12; i++ {
		cpu := time.Duration(min(i, 6))*5*time.Second + time.Duration(max(i-6, 0))*2500*time.Millisecond
		mem := uint64(100 * Mi)
		if i > 6 {
			mem = 200 * Mi
		}
		r.AddUsage(signals.UsageSample{At: Epoch.Add(time.Duration(i) * 10 * time.Second), CPU: cpu, WorkingSet: mem})
	}
	r.AddCFS(Epoch.Add(110*time.Second), 600, 300, 200)
	tr, err := r.Trace()
	require.NoError(t, err)
	require.Len(t, tr.Samples, 2)
	assert.InDelta(t, 0.5, tr.Samples[0].CPU, 1e-9)
	assert.Equal(t, float64(100*Mi), tr.Samples[0].Memory)
	assert.InDelta(t, 0.25, tr.Samples[1].CPU, 1e-9)
	assert.Equal(t, float64(200*Mi), tr.Samples[1].Memory)
	assert.InDelta(t, 0.5, tr.Samples[1].Burst, 1e-9)
	assert.InDelta(t, 0.2, tr.Samples[1].BurstCPU, 1e-9)
}

func TestRepeatedTracePlaysTheRecordingEndToEnd(t *testing.T) {
	rec := &Trace{Name: "rec", About: "A recording.", Step: 10 * time.Second, Samples: []Sample{{CPU: 0.1, Memory: 1}, {CPU: 0.2, Memory: 2}, {CPU: 0.3, Memory: 3}}}
	got, err := rec.Repeated(time.Minute + time.Second)
	require.NoError(t, err)
	require.Len(t, got.Samples, 7, "61 s at 10 s a sample, rounded up")
	for i, s := range got.Samples {
		assert.Equal(t, rec.Samples[i%3], s, "sample %d", i)
	}
	assert.Contains(t, got.About, "repeated to 1m1s")
	assert.Len(t, rec.Samples, 3, "the recording itself is left alone")

	same, err := rec.Repeated(30 * time.Second)
	require.NoError(t, err)
	assert.Same(t, rec, same, "a trace that covers the span is played once")

	_, err = rec.Repeated(time.Duration(MaxSamples+1) * 10 * time.Second)
	assert.ErrorContains(t, err, "at most")
}
