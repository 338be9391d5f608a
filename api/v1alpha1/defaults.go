package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The guardrails' defaults (docs/design.md section 2). The CRD schema
// carries the same values in +kubebuilder:default markers, and a test
// against the real apiserver checks that the two agree.
const (
	DefaultWatchDuration            = 30 * time.Minute
	DefaultOOMKills           int32 = 1
	DefaultRestarts           int32 = 3
	DefaultThrottlingRatio          = "0.25"
	DefaultCooldown                 = 24 * time.Hour
	DefaultUnschedulableGrace       = time.Minute
	DefaultCanaryDuration           = 10 * time.Minute
	DefaultRestoreTo                = RestorePrevious
	DefaultBackoffTimePeriod        = 10 * time.Minute
	DefaultMultiplyByTurn     int32 = 1
	DefaultMaxAttempts        int32 = 1
	DefaultTimeZone                 = "UTC"
	DefaultDegradedRolledBack int32 = 3
	DefaultDegradedOf         int32 = 5
	// MaxDegradedOf bounds spec.guardrails.degraded.of: the changes
	// counted must fit in status.history (MaxHistory).
	MaxDegradedOf int32 = 20
)

// The recommender's defaults (docs/recommender.md), for a spec.recommend
// that is present; the CRD schema carries the same values.
const (
	DefaultRecommendStrategy                  = StrategyInPlace
	DefaultRecommendInterval                  = 5 * time.Minute
	DefaultRecommendMinHistory                = 24 * time.Hour
	DefaultRecommendMinChangePercent    int32 = 10
	DefaultRecommendCPUPercentile       int32 = 90
	DefaultRecommendMemoryPercentile    int32 = 90
	DefaultRecommendSafetyMarginPercent int32 = 15
	DefaultRecommendKeepLimitProportion       = false
	DefaultRecommendSource                    = RecommendSourceKerf

	DefaultRecommendLowerPercentile            int32 = 50
	DefaultRecommendUpperPercentile            int32 = 95
	DefaultRecommendConfidenceInterval               = 24 * time.Hour
	DefaultRecommendPodMinimumCPU                    = "25m"
	DefaultRecommendPodMinimumMemory                 = "250Mi"
	DefaultRecommendOOMBumpMemory                    = "100Mi"
	DefaultRecommendOOMBumpPercent             int32 = 20
	DefaultRecommendCPUHalfLife                      = 24 * time.Hour
	DefaultRecommendMemoryHalfLife                   = 24 * time.Hour
	DefaultRecommendMemoryAggregationInterval        = 24 * time.Hour
	DefaultRecommendMemoryAggregationIntervals int32 = 8
)

// SetDefaults fills the fields left empty with the same defaults the
// apiserver applies, for a spec that did not come through it (a test, a
// spec built in code).
func (s *PolicySpec) SetDefaults() {
	for i := range s.Guardrails.FreezeWindows {
		if s.Guardrails.FreezeWindows[i].TimeZone == "" {
			s.Guardrails.FreezeWindows[i].TimeZone = DefaultTimeZone
		}
	}
	r := &s.Guardrails.Rollback
	if r.WatchDuration == nil {
		r.WatchDuration = &metav1.Duration{Duration: DefaultWatchDuration}
	}
	if r.OOMKills == nil {
		r.OOMKills = ptrTo(DefaultOOMKills)
	}
	if r.Restarts == nil {
		r.Restarts = ptrTo(DefaultRestarts)
	}
	if r.ThrottlingRatio == "" {
		r.ThrottlingRatio = DefaultThrottlingRatio
	}
	if r.Cooldown == nil {
		r.Cooldown = &metav1.Duration{Duration: DefaultCooldown}
	}
	if r.UnschedulableGrace == nil {
		r.UnschedulableGrace = &metav1.Duration{Duration: DefaultUnschedulableGrace}
	}
	if c := s.Guardrails.Canary; c != nil && c.Duration == nil {
		c.Duration = &metav1.Duration{Duration: DefaultCanaryDuration}
	}
	if r.RestoreTo == "" {
		r.RestoreTo = DefaultRestoreTo
	}
	if r.Backoff.TimePeriod == nil {
		r.Backoff.TimePeriod = &metav1.Duration{Duration: DefaultBackoffTimePeriod}
	}
	if r.Backoff.MultiplyByTurn == 0 {
		r.Backoff.MultiplyByTurn = DefaultMultiplyByTurn
	}
	if r.Backoff.MaxAttempts == 0 {
		r.Backoff.MaxAttempts = DefaultMaxAttempts
	}
	if s.Guardrails.Degraded != nil {
		s.Guardrails.Degraded.SetDefaults()
	}
	if s.Recommend != nil {
		s.Recommend.SetDefaults()
	}
}

// SetDefaults fills the fields of spec.guardrails.degraded left empty
// with the defaults the apiserver applies.
func (d *DegradedGuardrails) SetDefaults() {
	if d.RolledBack == nil {
		d.RolledBack = ptrTo(DefaultDegradedRolledBack)
	}
	if d.Of == nil {
		d.Of = ptrTo(DefaultDegradedOf)
	}
}

// SetDefaults fills the fields of spec.recommend left empty with the
// defaults the apiserver applies.
func (r *RecommendSpec) SetDefaults() {
	if r.Strategy == "" {
		r.Strategy = DefaultRecommendStrategy
	}
	if r.Interval == nil {
		r.Interval = &metav1.Duration{Duration: DefaultRecommendInterval}
	}
	if r.MinHistory == nil {
		r.MinHistory = &metav1.Duration{Duration: DefaultRecommendMinHistory}
	}
	if r.MinChangePercent == nil {
		r.MinChangePercent = ptrTo(DefaultRecommendMinChangePercent)
	}
	if r.CPUPercentile == nil {
		r.CPUPercentile = ptrTo(DefaultRecommendCPUPercentile)
	}
	if r.MemoryPercentile == nil {
		r.MemoryPercentile = ptrTo(DefaultRecommendMemoryPercentile)
	}
	if r.SafetyMarginPercent == nil {
		r.SafetyMarginPercent = ptrTo(DefaultRecommendSafetyMarginPercent)
	}
	if r.KeepLimitProportion == nil {
		r.KeepLimitProportion = ptrTo(DefaultRecommendKeepLimitProportion)
	}
	if r.Source == "" {
		r.Source = DefaultRecommendSource
	}
	if r.LowerPercentile == nil {
		r.LowerPercentile = ptrTo(DefaultRecommendLowerPercentile)
	}
	if r.UpperPercentile == nil {
		r.UpperPercentile = ptrTo(DefaultRecommendUpperPercentile)
	}
	durations := []struct {
		field **metav1.Duration
		def   time.Duration
	}{
		{&r.ConfidenceInterval, DefaultRecommendConfidenceInterval},
		{&r.CPUHalfLife, DefaultRecommendCPUHalfLife},
		{&r.MemoryHalfLife, DefaultRecommendMemoryHalfLife},
		{&r.MemoryAggregationInterval, DefaultRecommendMemoryAggregationInterval},
	}
	for _, d := range durations {
		if *d.field == nil {
			*d.field = &metav1.Duration{Duration: d.def}
		}
	}
	if r.MemoryAggregationIntervals == nil {
		r.MemoryAggregationIntervals = ptrTo(DefaultRecommendMemoryAggregationIntervals)
	}
	if r.PodMinimum == nil {
		r.PodMinimum = &PodMinimum{}
	}
	if r.PodMinimum.CPU == nil {
		r.PodMinimum.CPU = ptrTo(resource.MustParse(DefaultRecommendPodMinimumCPU))
	}
	if r.PodMinimum.Memory == nil {
		r.PodMinimum.Memory = ptrTo(resource.MustParse(DefaultRecommendPodMinimumMemory))
	}
	if r.OOMBump == nil {
		r.OOMBump = &OOMBump{}
	}
	if r.OOMBump.Memory == nil {
		r.OOMBump.Memory = ptrTo(resource.MustParse(DefaultRecommendOOMBumpMemory))
	}
	if r.OOMBump.Percent == nil {
		r.OOMBump.Percent = ptrTo(DefaultRecommendOOMBumpPercent)
	}
}

func ptrTo[T any](v T) *T { return &v }
