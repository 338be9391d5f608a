package quality

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/recommender"
)

// Kerf is Kerf's whole loop at a policy's defaults: the recommender of
// cluster/recommend fed as cluster/recommender feeds it, and the leader's
// apply, health watch and rollback rules (docs/design.md sections 2-4).
//
// What it keeps of the leader:
//   - a recommendation every spec.recommend.interval (5 min), none while
//     a change is watched;
//   - the recommendation's values applied in place at once, unless
//     policy.CheckApply blocks them (cooldown, rolled-back values,
//     failedPermanent);
//   - the health watch for watchDuration (30 min): an OOM kill where
//     memory changed, restarts, or a throttling ratio at or above
//     throttlingRatio from 2 min after the change once 300 periods are
//     counted, where CPU changed and has a limit;
//   - a breach restores the previous values of the breached resources,
//     starts their cooldown (24 h) and the backoff (cluster/policy).
//
// What it leaves out: canaries, gates, freeze windows and Degraded,
// which the defaults leave off or which no single container meets.
type Kerf struct {
	name     string
	model    *recommend.Model
	spec     v1alpha1.PolicySpec
	ref      v1alpha1.PolicyReference
	interval time.Duration
	ratio    float64

	st     recommend.ContainerState
	peak   recommend.PeakWindow
	status v1alpha1.RightsizingRecommendationStatus
	cur    Values
	// recommended is when the last recommendation was made.
	recommended time.Time
	// killed is an OOM kill since then, which makes a recommendation due
	// at once (cluster/recommender's recommendDue).
	killed bool
	// manifest is the workload's own values, the OOM latch's floor.
	manifest Values
	w        *kerfWatch
}

// kerfWatch is the health watch of one applied change.
type kerfWatch struct {
	at, end     time.Time
	previous    Values
	cpu, memory bool
	restarts    int
	throttled   int
	periods     int
	fingerprint string
}

// NewKerf returns Kerf at a policy's defaults with spec.recommend enabled.
func NewKerf() (*Kerf, error) { return NewKerfWith("Kerf", nil) }

// NewKerfScaledLimits returns Kerf with keepLimitProportion: limits scale
// with the requests, as a Guaranteed pod's always do.
func NewKerfScaledLimits() (*Kerf, error) {
	return NewKerfWith("Kerf, limits scaled", func(r *v1alpha1.RecommendSpec) { r.KeepLimitProportion = ptr.To(true) })
}

// NewKerfWith returns Kerf named name under a policy whose spec.recommend
// set changes from the defaults (nil: none), the rest defaulted.
func NewKerfWith(name string, set func(*v1alpha1.RecommendSpec)) (*Kerf, error) {
	spec := v1alpha1.PolicySpec{Recommend: &v1alpha1.RecommendSpec{Enabled: true}}
	if set != nil {
		set(spec.Recommend)
	}
	spec.SetDefaults()
	p := recommend.DefaultParams()
	r := spec.Recommend
	p.MinHistory = r.MinHistory.Duration
	p.MinChange = float64(*r.MinChangePercent) / 100
	p.CPUPercentile = float64(*r.CPUPercentile) / 100
	p.MemoryPercentile = float64(*r.MemoryPercentile) / 100
	p.SafetyMargin = float64(*r.SafetyMarginPercent) / 100
	p.KeepLimitProportion = *r.KeepLimitProportion
	ratio, err := strconv.ParseFloat(spec.Guardrails.Rollback.ThrottlingRatio, 64)
	if err != nil {
		return nil, fmt.Errorf("throttlingRatio: %w", err)
	}
	p.ThrottlingRatio = ratio
	m, err := recommend.NewModel(p)
	if err != nil {
		return nil, fmt.Errorf("kerf strategy: %w", err)
	}
	return &Kerf{name: name, model: m, spec: spec, interval: r.Interval.Duration, ratio: ratio,
		ref: v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindCluster, Name: "default", Fingerprint: policy.Fingerprint(spec)}}, nil
}

// Name is "Kerf", or the name NewKerfWith gave.
func (k *Kerf) Name() string { return k.name }

// Start forgets everything: a new workload.
func (k *Kerf) Start(manifest Values, start time.Time) {
	*k = Kerf{name: k.name, model: k.model, spec: k.spec, ref: k.ref, interval: k.interval, ratio: k.ratio, cur: manifest, manifest: manifest, recommended: start}
}

// Step feeds the sample to the recommender, judges a watched change,
// and applies a new recommendation when one is due.
func (k *Kerf) Step(o Observation) (Values, Action) {
	now, m := o.At, k.model
	// Fed as cluster/recommender's ingest and throttling do: CPU that ran,
	// the working set, the throttling ratio, an OOM kill at the higher of
	// the working set and the limit.
	if o.Running {
		k.st.AddCPU(m, o.CPU, now)
		k.st.AddMemory(m, &k.peak, o.Memory, now)
		if o.Periods > 0 {
			k.st.AddThrottling(m, float64(o.Throttled)/float64(o.Periods), now)
		}
	}
	if o.OOMKilled {
		k.st.RecordOOM(m, max(o.Memory, float64(o.Values.MemoryLimit)), now)
		k.killed = true
	}
	if k.w != nil {
		if restore := k.judge(o); restore != nil {
			return k.rollback(now, restore)
		}
	}
	if k.status.Rollback != nil {
		policy.Advance(now, k.status.Rollback, k.ref, k.spec.Guardrails.Rollback.Backoff)
	}
	// A recommendation is due an interval after the last, or at once
	// after an OOM kill; while a change is watched it is made but holds
	// the values (WatchRunning).
	if now.Sub(k.recommended) < k.interval && !k.killed {
		return k.cur, Kept
	}
	k.recommended, k.killed = now, false
	if k.w != nil {
		return k.cur, Kept
	}
	res := m.Recommend(&k.st, recommend.Input{Now: now, Containers: 1, Holds: recommender.HoldsOf(&k.status, now),
		Request:         recommend.Resources{CPUMilli: k.cur.CPURequest, MemoryBytes: k.cur.MemoryRequest},
		Limit:           recommend.Resources{CPUMilli: k.cur.CPULimit, MemoryBytes: k.cur.MemoryLimit},
		Guaranteed:      k.cur.Guaranteed(),
		ManifestRequest: recommend.Resources{CPUMilli: k.manifest.CPURequest, MemoryBytes: k.manifest.MemoryRequest},
		ManifestLimit:   recommend.Resources{CPUMilli: k.manifest.CPULimit, MemoryBytes: k.manifest.MemoryLimit}})
	if !res.Ready || !res.Changed {
		return k.cur, Kept
	}
	// Memory is written rounded up to a whole mebibyte (recommended.go).
	next := Values{CPURequest: res.Request.CPUMilli, CPULimit: res.Limit.CPUMilli,
		MemoryRequest: roundMi(res.Request.MemoryBytes), MemoryLimit: roundMi(res.Limit.MemoryBytes)}
	if next == k.cur {
		return k.cur, Kept
	}
	running, desired := containers(k.cur), containers(next)
	if b, err := policy.CheckApply(now, k.spec, &k.status, running, desired); err != nil || b != nil {
		return k.cur, Kept
	}
	if k.status.Rollback == nil {
		k.status.Rollback = &v1alpha1.RollbackState{}
	}
	fp := policy.ValueFingerprint(desired)
	if _, err := policy.StartMonitoring(now, k.status.Rollback, fp, k.ref); err != nil {
		return k.cur, Kept
	}
	k.w = &kerfWatch{at: now, end: now.Add(k.spec.Guardrails.Rollback.WatchDuration.Duration), previous: k.cur, fingerprint: fp,
		cpu:    next.CPURequest != k.cur.CPURequest || next.CPULimit != k.cur.CPULimit,
		memory: next.MemoryRequest != k.cur.MemoryRequest || next.MemoryLimit != k.cur.MemoryLimit}
	k.status.Change = &v1alpha1.Change{Resources: k.w.touched()}
	k.cur = next
	return k.cur, Changed
}

// judge applies the health watch's rules to one sample of a watched
// change. It returns the resources to restore on a breach, else nil; a
// watch that reached its end healthy is closed.
func (k *Kerf) judge(o Observation) []v1alpha1.ResourceName {
	w, g := k.w, k.spec.Guardrails.Rollback
	if o.OOMKilled {
		w.restarts++
		if w.memory && w.restarts >= int(*g.OOMKills) {
			return []v1alpha1.ResourceName{v1alpha1.ResourceMemory}
		}
		if w.restarts >= int(*g.Restarts) {
			return w.touched()
		}
	}
	if w.cpu && o.Periods > 0 && !o.At.Before(w.at.Add(throttlingDelay)) {
		w.throttled += o.Throttled
		w.periods += o.Periods
		if w.periods >= throttlingMinPeriods && float64(w.throttled)/float64(w.periods) >= k.ratio {
			return []v1alpha1.ResourceName{v1alpha1.ResourceCPU}
		}
	}
	if !o.At.Before(w.end) {
		_, _ = policy.MonitoringSucceeded(o.At, k.status.Rollback, &v1alpha1.HealthyValues{At: metav1.NewTime(o.At), ValueFingerprint: w.fingerprint})
		k.w = nil
	}
	return nil
}

// The health watch's throttling window (docs/health.md): it opens 2 min
// after the change and is judged once it holds 300 periods.
const (
	throttlingDelay      = 2 * time.Minute
	throttlingMinPeriods = 300
)

// touched is the resources the watched change moved.
func (w *kerfWatch) touched() []v1alpha1.ResourceName {
	var r []v1alpha1.ResourceName
	if w.cpu {
		r = append(r, v1alpha1.ResourceCPU)
	}
	if w.memory {
		r = append(r, v1alpha1.ResourceMemory)
	}
	return r
}

// rollback restores the previous values of the breached resources, with
// their cooldowns, the rolled-back fingerprint and the backoff, as
// cluster/rightsizing's restore records them.
func (k *Kerf) rollback(now time.Time, restore []v1alpha1.ResourceName) (Values, Action) {
	w := k.w
	k.w = nil
	next := k.cur
	for _, r := range restore {
		switch r {
		case v1alpha1.ResourceCPU:
			next.CPURequest, next.CPULimit = w.previous.CPURequest, w.previous.CPULimit
		case v1alpha1.ResourceMemory:
			next.MemoryRequest, next.MemoryLimit = w.previous.MemoryRequest, w.previous.MemoryLimit
		}
		policy.AddCooldown(&k.status, r, now.Add(k.spec.Guardrails.Rollback.Cooldown.Duration))
	}
	policy.AddRolledBackFingerprint(&k.status, w.fingerprint)
	_, _ = policy.RollingBack(now, k.status.Rollback, "Breach", "", containers(next))
	_, _ = policy.BackingOff(now, k.status.Rollback, k.spec.Guardrails.Rollback.Backoff)
	k.cur = next
	return next, RolledBack
}

// containers writes values as the one container a recommendation names.
func containers(v Values) []v1alpha1.ContainerResources {
	rv := func(cpu, mem int64) *v1alpha1.ResourceValues {
		var out v1alpha1.ResourceValues
		if cpu > 0 {
			out.CPU = resource.NewMilliQuantity(cpu, resource.DecimalSI)
		}
		if mem > 0 {
			out.Memory = resource.NewQuantity(mem, resource.BinarySI)
		}
		if out.CPU == nil && out.Memory == nil {
			return nil
		}
		return &out
	}
	return []v1alpha1.ContainerResources{{Name: "app", Requests: rv(v.CPURequest, v.MemoryRequest), Limits: rv(v.CPULimit, v.MemoryLimit)}}
}

// roundMi rounds bytes up to a whole mebibyte.
func roundMi(b int64) int64 { return (b + Mi - 1) / Mi * Mi }
