package recommender_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestRecommenderTakesThePolicysPodMinimum checks spec.recommend.podMinimum:
// a container using 50m and 40Mi is recommended exactly the policy's pod
// minimum, 80m and 100Mi, where the defaults (25m, 250Mi) would give
// about 60m and 250Mi.
func TestRecommenderTakesThePolicysPodMinimum(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(rs *v1alpha1.RecommendSpec) {
		rs.PodMinimum = &v1alpha1.PodMinimum{CPU: ptr.To(resource.MustParse("80m")), Memory: ptr.To(resource.MustParse("100Mi"))}
	}, nil)
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(80), got.Requests.CPU.MilliValue(), "CPU request %s: the pod minimum", got.Requests.CPU)
	assert.Equal(t, int64(100<<20), got.Requests.Memory.Value(), "memory request %s: the pod minimum, not the default 250Mi", got.Requests.Memory)
	assert.Equal(t, int64(100<<20), basis.Containers[0].TargetMemoryBytes)
}

// TestRecommenderTakesThePolicysOOMBump checks spec.recommend.oomBump:
// after an OOM kill at the 256Mi limit, percent 50 holds the memory
// request at max(256Mi + 100Mi, 256Mi × 1.5) = 384Mi with the 15% safety
// margin, 441.6Mi, rounded up to 442Mi; not the default's 410Mi.
func TestRecommenderTakesThePolicysOOMBump(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(rs *v1alpha1.RecommendSpec) {
		rs.OOMBump = &v1alpha1.OOMBump{Percent: ptr.To[int32](50)}
	}, func(sig *signals.Stores, pod *corev1.Pod) {
		sig.Kernel.AddOOMKill(pod.UID, "app", time.Now().Add(-time.Minute))
	})
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(442<<20), got.Requests.Memory.Value(), "memory request %s: 256Mi × 1.5 × 1.15", got.Requests.Memory)
	oom := refusalsOf(basis, recommend.ReasonOOMKill)
	require.NotEmpty(t, oom, "the OOM latch's refusal: %+v", basis.Containers[0].Refusals)
	for _, f := range oom {
		if recommend.Field(f.Field) == recommend.Request {
			assert.Equal(t, float64(442<<20), f.Threshold, "the OOM floor, in whole mebibytes")
			assert.Equal(t, float64(256<<20), f.Observed, "the peak at the kill: the limit")
		}
	}
}

// reading is one usage reading of the test's container: its CPU rate
// since the previous one, its working set, and how far before now it is.
type reading struct {
	ago        time.Duration
	cpuMilli   int64
	workingSet int64
}

// feedBatch is how many readings feedReadings adds at once: half the
// store's span, so that a loaded machine's pass may come up to a second
// late without a reading being lost.
const feedBatch = signals.UsageSamples / 2

// feedReadings gives the leader's usage store the readings, oldest first,
// as the agent's cumulative CPU counter from cpu on, feedBatch at a time
// with a second's wait for the recommender's 200 ms passes to read each
// batch, and returns the samples it gave.
func feedReadings(sig *signals.Stores, pod *corev1.Pod, now time.Time, cpu time.Duration, rs []reading) []signals.UsageSample {
	out := make([]signals.UsageSample, len(rs))
	for i, r := range rs {
		at := now.Add(-r.ago).Truncate(time.Second)
		if i > 0 {
			cpu += time.Duration(r.cpuMilli) * at.Sub(out[i-1].At) / 1000
		}
		out[i] = signals.UsageSample{PodUID: pod.UID, Container: "app", At: at, CPU: cpu,
			WorkingSet: uint64(r.workingSet), Peak: uint64(r.workingSet)}
		sig.Usage.Add(out[i])
		if i%feedBatch == feedBatch-1 || i == len(rs)-1 {
			time.Sleep(time.Second)
		}
	}
	return out
}

// localEstimate is what the recommender's core estimates, under p, for a
// container that had the samples, fed as the leader's loop feeds them.
func localEstimate(t *testing.T, p recommend.Params, samples []signals.UsageSample) recommend.Estimate {
	t.Helper()
	m, err := recommend.NewModel(p)
	require.NoError(t, err)
	var st recommend.ContainerState
	var w recommend.PeakWindow
	for i, s := range samples {
		if i > 0 {
			prev := samples[i-1]
			st.AddCPU(m, (s.CPU-prev.CPU).Seconds()/s.At.Sub(prev.At).Seconds(), s.At)
		}
		st.AddMemory(m, &w, float64(s.WorkingSet), s.At)
	}
	return m.Estimate(&st, 1)
}

// TestRecommenderTakesThePolicysPercentilesAndMemoryInterval checks the
// estimator's parameters of spec.recommend: twenty readings a minute
// apart, of a CPU rate and a working set that vary, under a policy with
// other percentiles, a one-minute memory aggregation interval (one peak
// per reading, not one for the whole history), no pod minimum and a
// short confidence interval, give the target and bounds the core gives
// with those parameters, which differ from the defaults'.
func TestRecommenderTakesThePolicysPercentilesAndMemoryInterval(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	rs := p.Spec.Recommend
	// The history reaches minHistory with the last batch only, so the one
	// recommendation is made from every reading.
	rs.MinHistory = &metav1.Duration{Duration: 18 * time.Minute}
	rs.CPUPercentile, rs.MemoryPercentile = ptr.To[int32](50), ptr.To[int32](60)
	rs.LowerPercentile, rs.UpperPercentile = ptr.To[int32](10), ptr.To[int32](99)
	rs.ConfidenceInterval = &metav1.Duration{Duration: 10 * time.Minute}
	rs.PodMinimum = &v1alpha1.PodMinimum{CPU: ptr.To(resource.MustParse("0")), Memory: ptr.To(resource.MustParse("0"))}
	rs.MemoryAggregationInterval = &metav1.Duration{Duration: time.Minute}
	dep := kubetest.Web(t, c, ns, p)
	sig := signals.New()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond}})
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")

	var readings []reading
	for i := range 20 {
		readings = append(readings, reading{ago: time.Duration(20-i) * time.Minute,
			cpuMilli: 20 + int64(i%10)*20, workingSet: int64(40+(i*7)%20*10) << 20})
	}
	samples := feedReadings(sig, pod, time.Now(), 0, readings)
	rsr, basis := waitRecommendedBy(t, c, ns)
	cb := basis.Containers[0]
	assert.Equal(t, uint32(19), cb.Samples, "every reading was fed")
	assert.Equal(t, 0.5, basis.CPUPercentile)
	assert.Equal(t, 0.6, basis.MemoryPercentile)

	want := recommend.DefaultParams()
	want.CPUPercentile, want.MemoryPercentile, want.LowerPercentile, want.UpperPercentile = 0.5, 0.6, 0.1, 0.99
	want.ConfidenceInterval, want.MinCPUMilli, want.MinMemoryBytes, want.MemoryInterval = 10*time.Minute, 0, 0, time.Minute
	e := localEstimate(t, want, samples)
	def := localEstimate(t, recommend.DefaultParams(), samples)
	t.Logf("policy's: target %+v lower %+v upper %+v; defaults': target %+v lower %+v upper %+v", e.Target, e.Lower, e.Upper, def.Target, def.Lower, def.Upper)
	require.NotEqual(t, def.Target.CPUMilli, e.Target.CPUMilli, "the test's readings tell the percentiles apart")
	require.NotEqual(t, def.Target.MemoryBytes, e.Target.MemoryBytes, "the test's readings tell the memory intervals apart")
	require.NotEqual(t, def.Lower, e.Lower)
	require.NotEqual(t, def.Upper, e.Upper)

	assert.Equal(t, e.Target.CPUMilli, cb.TargetCPUMilli)
	assert.Equal(t, e.Target.MemoryBytes, cb.TargetMemoryBytes)
	require.NotNil(t, cb.Lower)
	require.NotNil(t, cb.Upper)
	assert.Equal(t, &v1alpha1.BoundBasis{CPUMilli: e.Lower.CPUMilli, MemoryBytes: e.Lower.MemoryBytes}, cb.Lower, "lower bound: the 10th percentile, confidence over 10m")
	assert.Equal(t, &v1alpha1.BoundBasis{CPUMilli: e.Upper.CPUMilli, MemoryBytes: e.Upper.MemoryBytes}, cb.Upper, "upper bound: the 99th percentile")
	assert.Equal(t, e.Target.CPUMilli, rsr.Spec.Containers[0].Requests.CPU.MilliValue())
}

// setRecommend changes the policy guard's spec.recommend in ns.
func setRecommend(t *testing.T, c client.Client, ns string, set func(*v1alpha1.RecommendSpec)) {
	t.Helper()
	var p v1alpha1.RightsizingPolicy
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "guard"}, &p))
	set(p.Spec.Recommend)
	require.NoError(t, c.Update(context.Background(), &p))
}

// basisOf reads the recommendation web's basis.
func basisOf(t *testing.T, c client.Client, ns string) (*v1alpha1.RightsizingRecommendation, v1alpha1.RecommendationBasis) {
	t.Helper()
	rsr := kubetest.GetRSR(t, c, ns, "web")
	var b v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]), &b))
	require.Len(t, b.Containers, 1)
	return rsr, b
}

// TestRecommenderRestartsAHistoryWhoseShapeThePolicyChanged checks that
// a change of spec.recommend that does not shape the state (the safety
// margin) applies to the history kept, while a change of cpuHalfLife
// restarts it under the new model, once, counted: the samples are the
// new ones only, and a 200m past no longer holds up a 50m present.
func TestRecommenderRestartsAHistoryWhoseShapeThePolicyChanged(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	// Paused: an applied recommendation would be watched, and the
	// recommender writes nothing new to a watched one.
	p := kubetest.RecommendingPolicy(ns)
	p.Spec.Guardrails.Paused = true
	dep := kubetest.Web(t, c, ns, p)
	sig := signals.New()
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond}})
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	old := feedReadings(sig, pod, time.Now(), 0, []reading{{ago: 4 * time.Second, workingSet: 40 << 20},
		{ago: 3 * time.Second, cpuMilli: 200, workingSet: 40 << 20}, {ago: 2 * time.Second, cpuMilli: 200, workingSet: 40 << 20},
		{ago: time.Second, cpuMilli: 200, workingSet: 40 << 20}})
	_, basis := waitRecommendedBy(t, c, ns)
	require.Equal(t, uint32(3), basis.Containers[0].Samples)
	before := basis.Containers[0].TargetCPUMilli
	assert.GreaterOrEqual(t, before, int64(200), "the 200m history")

	// A safety margin of 50 %: applied at once, to the same history.
	setRecommend(t, c, ns, func(rs *v1alpha1.RecommendSpec) { rs.SafetyMarginPercent = ptr.To[int32](50) })
	require.Eventually(t, func() bool {
		_, basis = basisOf(t, c, ns)
		return basis.SafetyMargin == 0.5
	}, 30*time.Second, 50*time.Millisecond, "the new safety margin was never applied")
	assert.Equal(t, uint32(3), basis.Containers[0].Samples, "the history is kept")
	assert.Greater(t, basis.Containers[0].TargetCPUMilli, before, "the larger margin on the same history")
	assert.Equal(t, 0.0, leadertest.MetricValue(t, l, "kerf_recommender_history_restarts_total"))

	// A CPU half-life of 12h shapes the state: the history restarts.
	setRecommend(t, c, ns, func(rs *v1alpha1.RecommendSpec) { rs.CPUHalfLife = &metav1.Duration{Duration: 12 * time.Hour} })
	require.Eventually(t, func() bool {
		return leadertest.MetricValue(t, l, "kerf_recommender_history_restarts_total") == 1
	}, 30*time.Second, 50*time.Millisecond, "the history never restarted")
	// Three readings of 50m after the old ones (the first rate is taken
	// from the last old reading, which the loop keeps).
	last := old[len(old)-1]
	feedReadings(sig, pod, last.At.Add(4*time.Second), last.CPU, []reading{{ago: 4 * time.Second, workingSet: 40 << 20},
		{ago: 3 * time.Second, cpuMilli: 50, workingSet: 40 << 20}, {ago: 2 * time.Second, cpuMilli: 50, workingSet: 40 << 20},
		{ago: time.Second, cpuMilli: 50, workingSet: 40 << 20}}[1:])
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr, basis = basisOf(t, c, ns)
		return basis.Containers[0].TargetCPUMilli < 100
	}, 30*time.Second, 50*time.Millisecond, "the recommendation never came from the new samples alone: %+v", basis)
	// Made from the new samples only (the loop may have read two of the
	// three before it made it): the three old ones are gone.
	assert.Positive(t, basis.Containers[0].Samples)
	assert.LessOrEqual(t, basis.Containers[0].Samples, uint32(3), "the old samples are not in the history")
	assert.Less(t, rsr.Spec.Containers[0].Requests.CPU.MilliValue(), int64(100), "the 50m present, not the 200m past")
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_recommender_history_restarts_total"), "restarted once")
}

// TestRecommenderResumesAHistoryUnderItsPolicysModel checks checkpoints
// under a policy whose parameters shape the state (memoryHalfLife 12h,
// memoryAggregationIntervals 4): leader a writes web's checkpoint with
// that model's fingerprint, not the defaults', and leader b loads it
// under the same model (nothing refused), resuming a's samples.
func TestRecommenderResumesAHistoryUnderItsPolicysModel(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	p.Spec.Recommend.MemoryHalfLife = &metav1.Duration{Duration: 12 * time.Hour}
	p.Spec.Recommend.MemoryAggregationIntervals = ptr.To[int32](4)
	dep := kubetest.Web(t, c, ns, p)
	sigA := signals.New()
	a := leadertest.StartReplica(t, ns, "a", checkpointingConfig(sigA))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	now := time.Now()
	feedUsage(sigA, pod, now, 0, 4)
	first, _ := kubetest.WaitRecommended(t, c, ns)

	params := recommend.DefaultParams()
	params.MemoryHalfLife, params.MemoryIntervals = 12*time.Hour, 4
	m, err := recommend.NewModel(params)
	require.NoError(t, err)
	def, err := recommend.NewModel(recommend.DefaultParams())
	require.NoError(t, err)
	require.NotEqual(t, def.Fingerprint(), m.Fingerprint())
	// A checkpoint may be written before the pass that recommends has fed
	// every sample: wait for the one that holds them.
	var ck v1alpha1.RightsizingCheckpoint
	var st recommend.ContainerState
	require.Eventually(t, func() bool {
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &ck) != nil || len(ck.Status.Containers) != 1 {
			return false
		}
		st, err = recommend.LoadCheckpoint(m, ck.Status.Containers[0].Data)
		return err == nil && st.Samples() == 3
	}, 30*time.Second, 50*time.Millisecond, "no checkpoint of web with its 3 samples in the policy's model (last error %v)", err)
	assert.Equal(t, recommender.Fingerprint(m), ck.Status.Containers[0].Fingerprint, "the policy's model's fingerprint")
	stopLeader(t, a)

	require.NoError(t, c.Delete(ctx, first))
	sigB := signals.New()
	feedUsage(sigB, pod, now.Add(2*time.Second), 10*time.Second, 2)
	b := leadertest.StartReplica(t, ns, "b", checkpointingConfig(sigB))
	_, basis := waitRecommendedBy(t, c, ns)
	assert.Equal(t, uint32(4), basis.Containers[0].Samples, "a's three CPU samples carried over, and b's one")
	assert.Equal(t, 1.0, leadertest.MetricValue(t, b, "kerf_recommender_checkpoint_containers_loaded_total"))
	assert.Equal(t, 0.0, leadertest.MetricValue(t, b, "kerf_recommender_checkpoint_containers_refused_total", "reason", "fingerprint"))
	assert.Equal(t, 0.0, leadertest.MetricValue(t, b, "kerf_recommender_history_restarts_total"))
}

// TestRecommenderRecommendsOnceHistoryIsEnoughNotAnIntervalLater: a pass
// before minHistory makes nothing, and must not start the workload's
// interval. Under an hour's interval the recommendation comes as soon as
// the history is enough; before, it came an interval later (found by
// make bench-scale-recommend: 5 min 14 s after a 30 s minHistory).
func TestRecommenderRecommendsOnceHistoryIsEnoughNotAnIntervalLater(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(rs *v1alpha1.RecommendSpec) {
		rs.Interval = &metav1.Duration{Duration: time.Hour}
		rs.MinHistory = &metav1.Duration{Duration: 4 * time.Second}
	}, func(sig *signals.Stores, pod *corev1.Pod) {
		// The usage goes on after the helper's four readings (the last
		// at its start, 150 ms of CPU): 50m, a reading every 200 ms, so
		// the history reaches minHistory a few passes in.
		start := time.Now().Add(500 * time.Millisecond)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		t.Cleanup(func() { stop(); <-done })
		go func() {
			defer close(done)
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					if now.Before(start) {
						continue
					}
					cpu := 150*time.Millisecond + now.Sub(start)/20
					sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: now, CPU: cpu, WorkingSet: 40 << 20, Peak: 40 << 20})
				}
			}
		}()
	})
	var rsr v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) == nil
	}, 30*time.Second, 50*time.Millisecond, "no recommendation within 30 s of an hour's interval: the passes before minHistory started it")
	assert.Equal(t, v1alpha1.RecommendedByKerf, rsr.Labels[v1alpha1.RecommendedByLabel])
	basis, err := v1alpha1.ParseRecommendationBasis(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation])
	require.NoError(t, err)
	require.Len(t, basis.Containers, 1)
	history, err := time.ParseDuration(basis.Containers[0].History)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, history, 4*time.Second, "made once the history reached minHistory")
}
