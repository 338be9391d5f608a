package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RollbackPolicy is the backoff design's namespaced policy, served as it is
// written there (docs/api.md, "RollbackPolicy and ClusterRollbackPolicy").
//
// Kerf maps it onto the guardrails of a RightsizingPolicy: one resolver,
// one set of rules. At equal weight and scope a RightsizingPolicy beats it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=kerf
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Monitoring",type=string,JSONPath=`.spec.monitoringPeriod`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.rollbackTarget`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.spec.backoff.maxAttempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`!has(self.spec) || !has(self.spec.selector) || !has(self.spec.selector.namespaceSelector)`,message="a RollbackPolicy selects only in its own namespace; use a ClusterRollbackPolicy to select namespaces",fieldPath=".spec.selector.namespaceSelector"
type RollbackPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec selects workloads and sets the rollback rules.
	// +kubebuilder:default={}
	// +optional
	Spec RollbackPolicySpec `json:"spec"`
	// Status is what the leader saw of the policy.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// RollbackPolicyList is a list of RollbackPolicies.
// +kubebuilder:object:root=true
type RollbackPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []RollbackPolicy `json:"items"`
}

// ClusterRollbackPolicy is the backoff design's cluster-scoped policy: a
// RollbackPolicy that selects workloads in any namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=kerf
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Monitoring",type=string,JSONPath=`.spec.monitoringPeriod`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.rollbackTarget`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.spec.backoff.maxAttempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRollbackPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec selects workloads and sets the rollback rules.
	// +kubebuilder:default={}
	// +optional
	Spec RollbackPolicySpec `json:"spec"`
	// Status is what the leader saw of the policy.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// ClusterRollbackPolicyList is a list of ClusterRollbackPolicies.
// +kubebuilder:object:root=true
type ClusterRollbackPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []ClusterRollbackPolicy `json:"items"`
}

// RollbackTarget says which values a RollbackPolicy's rollback restores,
// in the backoff design's words.
// +kubebuilder:validation:Enum=LastSuccessful;Manifest
type RollbackTarget string

// The rollback targets. Kerf's Previous is not offered: the design names
// only these two (docs/api.md).
const (
	// RollbackTargetLastSuccessful restores the last values that passed a
	// health watch: restoreTo LastHealthy.
	RollbackTargetLastSuccessful RollbackTarget = "LastSuccessful"
	// RollbackTargetManifest restores the workload manifest's values:
	// restoreTo Manifest.
	RollbackTargetManifest RollbackTarget = "Manifest"
)

// RollbackPolicySpec is the spec of RollbackPolicy and ClusterRollbackPolicy,
// with the backoff design's field names. Each field maps onto one of
// spec.guardrails.rollback (docs/api.md has the table). The thresholds carry
// the RightsizingPolicy's markers, and a test holds the two schemas equal.
type RollbackPolicySpec struct {
	// Selector picks the workloads the policy governs; omitted, it picks
	// every workload in its scope.
	// +optional
	Selector PolicySelector `json:"selector,omitempty"`
	// Weight orders policies that select the same workload: the highest
	// wins, then a namespaced policy over a cluster one, then a
	// RightsizingPolicy over a RollbackPolicy, then the oldest.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	Weight int32 `json:"weight,omitempty"`
	// MonitoringPeriod is how long the health watch lasts after a change
	// (guardrails.rollback.watchDuration).
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30m or 1h30m (units ns, us, ms, s, m, h)"
	// +optional
	MonitoringPeriod *metav1.Duration `json:"monitoringPeriod,omitempty"`
	// RollbackTarget says which values a rollback restores: LastSuccessful
	// (restoreTo LastHealthy) or Manifest.
	// +kubebuilder:default=LastSuccessful
	// +optional
	RollbackTarget RollbackTarget `json:"rollbackTarget,omitempty"`
	// AdoptionThreshold is the percentage of the workload's pods that must
	// run the applied values for the watch to end Healthy
	// (guardrails.rollback.adoptionThresholdPercent).
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	AdoptionThreshold int32 `json:"adoptionThreshold,omitempty"`
	// Backoff says when the same values may be tried again after a
	// rollback (guardrails.rollback.backoff).
	// +kubebuilder:default={}
	// +optional
	Backoff Backoff `json:"backoff,omitempty"`
	// OOMKills is the count of OOM kills since the change that rolls memory
	// back; 0 turns the signal off.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	OOMKills *int32 `json:"oomKills,omitempty"`
	// Restarts is the count of container restarts since the change that
	// rolls every touched resource back; 0 turns the signal off.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +optional
	Restarts *int32 `json:"restarts,omitempty"`
	// ThrottlingRatio is the CFS throttling ratio (throttled periods over
	// periods) that rolls CPU back: a decimal string in (0, 1].
	// +kubebuilder:default="0.25"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0([.][0-9]+)?|1([.]0+)?)$') && double(self) > 0.0`,message="must be a decimal string in (0, 1], such as '0.25'"
	// +optional
	ThrottlingRatio string `json:"throttlingRatio,omitempty"`
	// Cooldown is how long decreases of a rolled-back resource stay blocked
	// after the rollback; 0 turns cooldowns off.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s')`,message="must be a duration such as 24h or 0 (units ns, us, ms, s, m, h)"
	// +optional
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`
}

// DefaultRollbackTarget is a RollbackPolicy's rollbackTarget when omitted.
const DefaultRollbackTarget = RollbackTargetLastSuccessful
