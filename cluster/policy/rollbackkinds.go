package policy

import (
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// FromRollbackPolicy is the PolicySpec a RollbackPolicy or
// ClusterRollbackPolicy spec means: the backoff design's fields moved to
// the guardrails they name (docs/api.md, "RollbackPolicy and
// ClusterRollbackPolicy").
//
// From then on the resolver, the fingerprints and the guardrails see one
// kind of spec. A rollback kind sets no pause, no freeze windows and no
// recommender; unschedulableGrace keeps its default.
func FromRollbackPolicy(s *v1alpha1.RollbackPolicySpec) v1alpha1.PolicySpec {
	return v1alpha1.PolicySpec{
		Selector: s.Selector,
		Weight:   s.Weight,
		Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{
			WatchDuration:            s.MonitoringPeriod,
			OOMKills:                 s.OOMKills,
			Restarts:                 s.Restarts,
			ThrottlingRatio:          s.ThrottlingRatio,
			Cooldown:                 s.Cooldown,
			RestoreTo:                restoreTo(s.RollbackTarget),
			AdoptionThresholdPercent: s.AdoptionThreshold,
			Backoff:                  s.Backoff,
		}},
	}
}

// restoreTo maps the design's rollbackTarget onto restoreTo: LastSuccessful
// (the default) is LastHealthy, Manifest is Manifest. Any other value is
// refused by the CRD; it is passed on as is rather than guessed at.
func restoreTo(t v1alpha1.RollbackTarget) v1alpha1.RestoreTarget {
	switch t {
	case "", v1alpha1.RollbackTargetLastSuccessful:
		return v1alpha1.RestoreLastHealthy
	case v1alpha1.RollbackTargetManifest:
		return v1alpha1.RestoreManifest
	}
	return v1alpha1.RestoreTarget(t)
}
