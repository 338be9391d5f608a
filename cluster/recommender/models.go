package recommender

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// The recommender's models: the parameters a policy gives, one model per
// distinct set, and each workload adopting its policy's.

// params returns the recommender parameters of a policy's spec.recommend
// and throttling ratio: the defaults' bucket layout with every other
// parameter the policy's.
func (r *Loop) params(spec v1alpha1.PolicySpec) (recommend.Params, error) {
	rs := spec.Recommend.DeepCopy()
	rs.SetDefaults()
	p := r.base.Params()
	percent := func(v *int32) float64 { return float64(*v) / 100 }
	p.MinHistory = rs.MinHistory.Duration
	p.MinChange = percent(rs.MinChangePercent)
	p.CPUPercentile = percent(rs.CPUPercentile)
	p.MemoryPercentile = percent(rs.MemoryPercentile)
	p.LowerPercentile = percent(rs.LowerPercentile)
	p.UpperPercentile = percent(rs.UpperPercentile)
	p.SafetyMargin = percent(rs.SafetyMarginPercent)
	p.ConfidenceInterval = rs.ConfidenceInterval.Duration
	p.MinCPUMilli = rs.PodMinimum.CPU.MilliValue()
	p.MinMemoryBytes = rs.PodMinimum.Memory.Value()
	p.OOMBumpBytes = rs.OOMBump.Memory.Value()
	p.OOMBumpRatio = 1 + percent(rs.OOMBump.Percent)
	p.CPUHalfLife = rs.CPUHalfLife.Duration
	p.MemoryHalfLife = rs.MemoryHalfLife.Duration
	p.MemoryInterval = rs.MemoryAggregationInterval.Duration
	p.MemoryIntervals = int(*rs.MemoryAggregationIntervals)
	p.UpscaleOnlyCPU = slices.Contains(rs.UpscaleOnly, v1alpha1.ResourceCPU)
	p.UpscaleOnlyMemory = slices.Contains(rs.UpscaleOnly, v1alpha1.ResourceMemory)
	p.KeepLimitProportion = *rs.KeepLimitProportion
	ratio := spec.Guardrails.Rollback.ThrottlingRatio
	if ratio == "" {
		ratio = v1alpha1.DefaultThrottlingRatio
	}
	tr, err := strconv.ParseFloat(ratio, 64)
	if err != nil {
		return p, fmt.Errorf("parse throttlingRatio %q: %w", ratio, err)
	}
	p.ThrottlingRatio = tr
	return p, nil
}

// model returns the model for a policy's parameters (params), made once
// and shared by the workloads that have them. When maxModels distinct
// models are in use (after dropping, at most once a pass, the ones no
// workload uses) it returns the defaults' model and fellBack.
func (r *Loop) model(spec v1alpha1.PolicySpec) (m *recommend.Model, fellBack bool, err error) {
	p, err := r.params(spec)
	if err != nil {
		return nil, false, err
	}
	if m := r.models[p]; m != nil {
		return m, false, nil
	}
	if len(r.models) >= maxModels && r.modelsPruned != r.tick {
		r.modelsPruned = r.tick
		used := map[*recommend.Model]bool{r.base: true}
		for _, tw := range r.workloads {
			used[tw.model] = true
		}
		maps.DeleteFunc(r.models, func(_ recommend.Params, m *recommend.Model) bool { return !used[m] })
	}
	if len(r.models) >= maxModels {
		return r.base, true, nil
	}
	m, err = recommend.NewModel(p)
	if err != nil {
		return nil, false, err
	}
	r.models[p] = m
	return m, false, nil
}

// modelChoice is what model returned for a policy's parameters.
type modelChoice struct {
	m        *recommend.Model
	fellBack bool
	err      error
}

// modelOf is model for a policy as ResolveShared resolved it, once a pass
// per policy. The workloads one policy governs share its Resolved, so its
// parameters are worked out once, not for each workload.
func (r *Loop) modelOf(res *policy.Resolved) (*recommend.Model, bool, error) {
	if r.passModelsAt != r.tick {
		clear(r.passModels)
		r.passModelsAt = r.tick
	}
	c, ok := r.passModels[res]
	if !ok {
		c.m, c.fellBack, c.err = r.model(res.Spec)
		r.passModels[res] = c
	}
	return c.m, c.fellBack, c.err
}

// adopt gives a workload the model of its policy, once a pass. Any change
// applies at once, except one of the parameters that shape the state: the
// half-lives, the memory interval and count, which make the model's
// fingerprint.
//
// Such a change restarts its history under the new model, as old samples
// cannot be re-weighted into the new shape. It keeps its latches, the OOM
// kill and the throttling in the window: a restarted history must not
// lower what a latch holds.
func (r *Loop) adopt(ref workload.Ref, tw *trackedWorkload, rw *resolvedWorkload, now time.Time) {
	m, fellBack, err := r.modelOf(rw.resolved)
	if err != nil {
		rw.modelErr = fmt.Errorf("recommender parameters of %s %s: %w", rw.resolved.Ref.Kind, rw.resolved.Ref.Name, err)
		if tw.model == nil {
			tw.model = r.base
		}
		return
	}
	if fellBack && !tw.fellBack {
		r.log.Warn("recommender has its maximum of distinct parameter sets; the workload is recommended for with the defaults",
			"namespace", ref.Namespace, "workload", ref.String(), "policy", string(rw.resolved.Ref.Kind)+"/"+rw.resolved.Ref.Name, "maxModels", maxModels)
		r.modelMetrics.fellBack.Inc()
	}
	tw.fellBack = fellBack
	old := tw.model
	tw.model = m
	if old == nil || old == m || old.Fingerprint() == m.Fingerprint() || len(tw.containers) == 0 {
		return
	}
	for i := range tw.containers {
		c := &tw.containers[i]
		sig := c.state.Signals(old, now)
		var fresh recommend.ContainerState
		if !sig.OOMAt.IsZero() {
			fresh.RecordOOM(m, sig.OOMPeakBytes, sig.OOMAt)
		}
		if sig.ThrottlingRatio > 0 {
			fresh.AddThrottling(m, sig.ThrottlingRatio, now)
		}
		c.state = fresh
	}
	// The instances' peak windows are the old interval's: each is
	// cleared when it is next fed (ingest).
	tw.gen++
	r.log.Info("recommender history restarts: the policy changed a parameter that shapes it", "namespace", ref.Namespace, "workload", ref.String(),
		"policy", string(rw.resolved.Ref.Kind)+"/"+rw.resolved.Ref.Name, "containers", len(tw.containers),
		"fingerprint", Fingerprint(m), "previousFingerprint", Fingerprint(old))
	r.modelMetrics.restarted.Inc()
}

// newModelMetrics registers the model counters on reg.
func newModelMetrics(reg prometheus.Registerer) (*modelMetrics, error) {
	m := &modelMetrics{
		restarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_history_restarts_total",
			Help: "Workload histories the recommender restarted because their policy changed a parameter that shapes them (half-lives, memory aggregation interval or count)."}),
		fellBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_recommender_model_fallbacks_total",
			Help: "Workloads the recommender fed and recommended for with the default parameters because it had its maximum of distinct parameter sets."}),
	}
	for _, c := range []prometheus.Collector{m.restarted, m.fellBack} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the recommender's model metrics: %w", err)
		}
	}
	return m, nil
}

// modelMetrics are the recommender's counters of its models.
type modelMetrics struct {
	restarted, fellBack prometheus.Counter
}
