package quality

import (
	"math"
	"time"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

// The VPA components' defaults (vertical-pod-autoscaler v1.8.1, the
// version go.mod pins): the recommender's flags and the updater's.
const (
	vpaRecommenderInterval = time.Minute
	vpaUpdaterInterval     = time.Minute
	// vpaPodLifetimeUpdateThreshold: a pod younger than this is updated
	// only when outside the bounds or after a quick OOM.
	vpaPodLifetimeUpdateThreshold = 12 * time.Hour
	// vpaMinChangePriority: the summed relative change that updates a pod
	// inside the bounds.
	vpaMinChangePriority = 0.1
	// vpaEvictAfterOOMThreshold: an OOM kill this soon after the
	// container started is a quick OOM.
	vpaEvictAfterOOMThreshold = 10 * time.Minute
)

// VPA is the Vertical Pod Autoscaler at its defaults: its own
// recommender code (the module's model and logic packages: decaying
// histograms, AggregateContainerState, the percentile estimators with
// margins and confidence, the OOM bump) and its updater's decision,
// applied in place.
//
// The updater's rules (pkg/updater/priority) are kept, not its code,
// which needs pods and VPA objects: a pod is updated when a request is
// outside [lowerBound, upperBound], after a quick OOM, or when it is 12 h
// old and the requests would change by 10 %. The update sets the requests
// to the target and scales the limits to keep the manifest's ratio
// (controlledValues RequestsAndLimits).
type VPA struct {
	rec logic.PodResourceRecommender

	agg       *model.AggregateContainerState
	container *model.ContainerState
	cur       Values
	// cpuRatio and memRatio are the manifest's limit/request ratios, 0
	// without a limit.
	cpuRatio, memRatio float64
	podStart           time.Time
	// containerStart and lastOOM make the quick-OOM test.
	containerStart, lastOOM, lastOOMStart time.Time
	rec1, upd                             time.Time
	last                                  logic.RecommendedContainerResources
	haveLast                              bool
	// The metrics API's one-minute window: when it started, the CPU of
	// its samples in core-seconds, their highest working set.
	fed            time.Time
	window         time.Duration
	cpuSum, memMax float64
}

// NewVPA returns VPA with the recommender's default flags.
func NewVPA() *VPA {
	return &VPA{rec: logic.CreatePodResourceRecommender(logic.RecommendationConfig{
		SafetyMarginFraction:       0.15,
		PodMinCPUMillicores:        25,
		PodMinMemoryMb:             250,
		TargetCPUPercentile:        0.9,
		LowerBoundCPUPercentile:    0.5,
		UpperBoundCPUPercentile:    0.95,
		ConfidenceIntervalCPU:      24 * time.Hour,
		TargetMemoryPercentile:     0.9,
		LowerBoundMemoryPercentile: 0.5,
		UpperBoundMemoryPercentile: 0.95,
		ConfidenceIntervalMemory:   24 * time.Hour,
	})}
}

// Name is "VPA".
func (v *VPA) Name() string { return "VPA" }

// Start makes a fresh aggregate state: a new workload.
func (v *VPA) Start(manifest Values, start time.Time) {
	agg := model.NewAggregateContainerState()
	*v = VPA{rec: v.rec, agg: agg, cur: manifest, podStart: start, containerStart: start, rec1: start, upd: start, fed: start,
		container: model.NewContainerState(model.Resources{
			model.ResourceCPU:    model.CPUAmountFromCores(float64(manifest.CPURequest) / 1000),
			model.ResourceMemory: model.MemoryAmountFromBytes(float64(manifest.MemoryRequest)),
		}, agg)}
	if manifest.CPURequest > 0 {
		v.cpuRatio = float64(manifest.CPULimit) / float64(manifest.CPURequest)
	}
	if manifest.MemoryRequest > 0 {
		v.memRatio = float64(manifest.MemoryLimit) / float64(manifest.MemoryRequest)
	}
}

// Step feeds the sample as VPA's cluster feeder does (CPU rate and working
// set from the metrics API, OOM kills at the memory request), and runs the
// recommender and the updater on their intervals.
func (v *VPA) Step(o Observation) (Values, Action) {
	now := o.At
	v.feed(o)
	if o.OOMKilled {
		// The OOM observer records the container's memory request.
		_ = v.container.RecordOOM(now, model.MemoryAmountFromBytes(float64(o.Values.MemoryRequest)))
		v.lastOOM, v.lastOOMStart = now, v.containerStart
	}
	if !o.Running || o.OOMKilled {
		v.containerStart = now
	}
	if now.Sub(v.rec1) >= vpaRecommenderInterval {
		v.rec1 = now
		r := v.rec.GetRecommendedPodResources(model.ContainerNameToAggregateStateMap{"app": v.agg})
		v.last, v.haveLast = r["app"], true
	}
	if !v.haveLast || now.Sub(v.upd) < vpaUpdaterInterval {
		return v.cur, Kept
	}
	v.upd = now
	return v.update(now)
}

// feed keeps the samples of one metrics window, a minute (the metrics
// server's resolution and the recommender's interval), and feeds their
// mean CPU and highest working set when it closes.
func (v *VPA) feed(o Observation) {
	if o.Running {
		step := o.At.Sub(v.fed) - v.window
		v.cpuSum += o.CPU * step.Seconds()
		v.memMax = max(v.memMax, o.Memory)
	}
	v.window = o.At.Sub(v.fed)
	if v.window < vpaRecommenderInterval {
		return
	}
	start := v.fed
	if v.memMax > 0 || v.cpuSum > 0 {
		v.container.AddSample(&model.ContainerUsageSample{MeasureStart: start, Usage: model.CPUAmountFromCores(v.cpuSum / v.window.Seconds()), Resource: model.ResourceCPU})
		v.container.AddSample(&model.ContainerUsageSample{MeasureStart: start, Usage: model.MemoryAmountFromBytes(v.memMax), Resource: model.ResourceMemory})
	}
	v.fed, v.window, v.cpuSum, v.memMax = o.At, 0, 0, 0
}

// update is the updater's decision on the one pod, and the in-place update.
func (v *VPA) update(now time.Time) (Values, Action) {
	target := v.last.Target
	cpu := int64(target[model.ResourceCPU])    // millicores
	mem := int64(target[model.ResourceMemory]) // bytes
	if cpu <= 0 || mem <= 0 {
		return v.cur, Kept
	}
	outside := func(req int64, r model.ResourceName) bool {
		return req < int64(v.last.LowerBound[r]) || req > int64(v.last.UpperBound[r])
	}
	out := outside(v.cur.CPURequest, model.ResourceCPU) || outside(v.cur.MemoryRequest, model.ResourceMemory)
	diff := math.Abs(float64(cpu-v.cur.CPURequest))/math.Max(float64(v.cur.CPURequest), 1) +
		math.Abs(float64(mem-v.cur.MemoryRequest))/math.Max(float64(v.cur.MemoryRequest), 1)
	quickOOM := !v.lastOOM.IsZero() && v.lastOOM.Sub(v.lastOOMStart) < vpaEvictAfterOOMThreshold && now.Sub(v.lastOOM) < vpaEvictAfterOOMThreshold
	if !out && !quickOOM && (now.Sub(v.podStart) < vpaPodLifetimeUpdateThreshold || diff < vpaMinChangePriority) {
		return v.cur, Kept
	}
	if diff == 0 {
		return v.cur, Kept
	}
	next := Values{CPURequest: cpu, MemoryRequest: mem,
		CPULimit: int64(math.Ceil(float64(cpu) * v.cpuRatio)), MemoryLimit: int64(math.Ceil(float64(mem) * v.memRatio))}
	if next == v.cur {
		return v.cur, Kept
	}
	v.cur = next
	return next, Changed
}
