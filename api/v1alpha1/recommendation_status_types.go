package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RightsizingRecommendationStatus is what Kerf did with a recommendation.
type RightsizingRecommendationStatus struct {
	// Phase is where the recommendation is in its life.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason is a CamelCase word saying why the phase is what it is; for
	// Blocked one of Paused, FreezeWindow, Cooldown, SameValues,
	// FailedPermanent, NoPolicy, or a gate's: ProtectedNamespace,
	// RolloutInProgress, QoSClass, PodLevelResources, LimitRange, ResourceQuota,
	// DisruptionBudget, NodeHeadroom, GateUnavailable.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says the same for people.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Applied and HealthWatch (reasons Watching, Healthy,
	// OOMKills, Restarts, Throttling, NotAdopted, Unschedulable,
	// Infeasible).
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// Policy is the policy that governs the workload, chosen by weight.
	// +optional
	Policy *PolicyReference `json:"policy,omitempty"`
	// Change is the change being watched, or the last one.
	// +optional
	Change *Change `json:"change,omitempty"`
	// LastHealthy are the last values that passed a health watch, the
	// target of restoreTo LastHealthy.
	// +optional
	LastHealthy *HealthyValues `json:"lastHealthy,omitempty"`
	// Rollback is the backoff state machine (docs/design.md section 4).
	// +optional
	Rollback *RollbackState `json:"rollback,omitempty"`
	// Breach is the breach of the current change, once the health watch
	// saw one: what the rollback restores and why.
	// +optional
	Breach *Breach `json:"breach,omitempty"`
	// Degraded is the Degraded mark: its figures while the workload is
	// Degraded, and the last resume, from which changes count.
	// +optional
	Degraded *DegradedState `json:"degraded,omitempty"`
	// Cooldowns block decreases of a resource until a time, after a
	// rollback of that resource.
	// +listType=map
	// +listMapKey=resource
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Cooldowns []Cooldown `json:"cooldowns,omitempty"`
	// RolledBackFingerprints are the value fingerprints of changes rolled
	// back; they are not applied again unless the backoff allows it.
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	RolledBackFingerprints []string `json:"rolledBackFingerprints,omitempty"`
	// RecordedRefusals identifies the recommender's refusals (of the
	// kerf.dev/recommendation-basis annotation) last recorded as a refused
	// action, so that a set of refusals is recorded once, not every pass;
	// it stays when the refusals end, so the same set coming back is not
	// recorded again.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	RecordedRefusals string `json:"recordedRefusals,omitempty"`
	// History are Kerf's actions on the workload, oldest first; the newest
	// 100 are kept.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	History []Action `json:"history,omitempty"`
}

// DegradedState is what the leader remembers of the Degraded mark
// (spec.guardrails.degraded; docs/health.md).
type DegradedState struct {
	// Since is when the workload was marked Degraded; unset once resumed.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// RolledBack and Of are the verdict's figures: RolledBack of the last
	// Of changes were rolled back.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RolledBack int32 `json:"rolledBack,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Of int32 `json:"of,omitempty"`
	// PolicyFingerprint is the governing policy's fingerprint at the
	// verdict; a policy whose fingerprint differs resumes the workload.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	PolicyFingerprint string `json:"policyFingerprint,omitempty"`
	// ResumedAt is when the mark was last lifted: only the changes
	// applied from then on count.
	// +optional
	ResumedAt *metav1.Time `json:"resumedAt,omitempty"`
}

// The limits of a recommendation's status, beside the markers that set
// them. The leader cuts what it writes to them, so no write is refused;
// the hub checks the actions it receives against them. The markers cannot
// name Go constants: limits_test.go checks that manifests/crd carries the
// same figures.
const (
	// MaxReasonLength bounds status.reason and the reason of an action, a
	// rollback and a turn.
	MaxReasonLength = 128
	// MaxStatusMessageLength bounds status.message.
	MaxStatusMessageLength = 32768
	// MaxConditionMessageLength bounds a condition's message; the marker
	// is metav1.Condition's own.
	MaxConditionMessageLength = 32768
	// MaxRolledBackFingerprints bounds status.rolledBackFingerprints.
	MaxRolledBackFingerprints = 100
	// MaxHistory bounds status.history: the newest actions are kept
	// (docs/design.md section 2).
	MaxHistory = 100
)

// PolicyKind is the kind of a policy.
// +kubebuilder:validation:Enum=RightsizingPolicy;ClusterRightsizingPolicy;RollbackPolicy;ClusterRollbackPolicy
type PolicyKind string

// The policy kinds: Kerf's own, and the backoff design's two.
const (
	PolicyKindNamespaced      PolicyKind = "RightsizingPolicy"
	PolicyKindCluster         PolicyKind = "ClusterRightsizingPolicy"
	PolicyKindRollback        PolicyKind = "RollbackPolicy"
	PolicyKindClusterRollback PolicyKind = "ClusterRollbackPolicy"
)

// Namespaced reports whether policies of kind k live in a namespace and
// select only there.
func (k PolicyKind) Namespaced() bool {
	return k == PolicyKindNamespaced || k == PolicyKindRollback
}

// Rollback reports whether k is one of the backoff design's kinds,
// RollbackPolicy or ClusterRollbackPolicy.
func (k PolicyKind) Rollback() bool {
	return k == PolicyKindRollback || k == PolicyKindClusterRollback
}

// PolicyReference names the policy chosen for a workload. A
// RightsizingPolicy or RollbackPolicy is in the recommendation's namespace.
type PolicyReference struct {
	// Kind is RightsizingPolicy, ClusterRightsizingPolicy, RollbackPolicy
	// or ClusterRollbackPolicy.
	Kind PolicyKind `json:"kind"`
	// Name is the policy's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Fingerprint is the policy's fingerprint when it was chosen.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
}
