package auditv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// EntryOf is the audit entry of action a of recommendation rsr: the one
// way the leader's audit API and its hub forwarder both build it, so the
// hub stores what the leader shows. Lists are empty, never null.
func EntryOf(rsr *v1alpha1.RightsizingRecommendation, a *v1alpha1.Action) Entry {
	return Entry{
		Time:           metav1.NewTime(a.Time.UTC()),
		Type:           a.Type,
		Reason:         a.Reason,
		Message:        a.Message,
		Resources:      NonNil(a.Resources),
		Containers:     NonNil(a.Containers),
		Figures:        NonNil(a.Figures),
		Refusals:       a.Refusals,
		Namespace:      rsr.Namespace,
		Recommendation: rsr.Name,
		Workload:       Workload{Kind: rsr.Spec.TargetRef.Kind, Name: rsr.Spec.TargetRef.Name},
	}
}

// NonNil returns s, or an empty slice for nil: the API's lists are never
// null in JSON.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
