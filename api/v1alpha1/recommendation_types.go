package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RightsizingRecommendation asks Kerf to apply CPU and memory values to one
// workload, then watch it and roll back when the change proves harmful
// (docs/design.md sections 2 to 4). A recommender (a person, a script,
// another tool) writes the spec; Kerf's leader writes the status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rsr,categories=kerf
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.targetRef.name`,description="The workload the values are for"
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`,description="How the values reach the pods"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Where the recommendation is in its life"
// +kubebuilder:printcolumn:name="HealthWatch",type=string,JSONPath=`.status.conditions[?(@.type=="HealthWatch")].reason`,description="The health watch's verdict"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RightsizingRecommendation struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the change asked for.
	Spec RightsizingRecommendationSpec `json:"spec"`
	// Status is what Kerf did with it.
	// +optional
	Status RightsizingRecommendationStatus `json:"status,omitempty"`
}

// RightsizingRecommendationList is a list of RightsizingRecommendations.
// +kubebuilder:object:root=true
type RightsizingRecommendationList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the recommendations.
	Items []RightsizingRecommendation `json:"items"`
}

// RightsizingRecommendationSpec is the change a recommender asks for.
type RightsizingRecommendationSpec struct {
	// TargetRef is the workload, in the recommendation's namespace.
	TargetRef TargetRef `json:"targetRef"`
	// Strategy says how the values reach the pods: InPlace, Rollout or
	// Deferred.
	Strategy Strategy `json:"strategy"`
	// Containers are the values per container; a container not listed is
	// left alone.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Containers []ContainerResources `json:"containers"`
	// HPA coordinates the HorizontalPodAutoscaler that targets the workload:
	// when CPU requests change, its CPU utilization target moves so that the
	// absolute target (utilization × request) stays the same.
	// +optional
	HPA *HPACoordination `json:"hpa,omitempty"`
}

// TargetRef names a workload Kerf can manage.
type TargetRef struct {
	// APIVersion is the workload's API version; only apps/v1.
	// +kubebuilder:validation:Enum=apps/v1
	// +kubebuilder:default="apps/v1"
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind WorkloadKind `json:"kind"`
	// Name is the workload's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// HPACoordination says whether and which HorizontalPodAutoscaler follows a
// CPU requests change.
type HPACoordination struct {
	// Coordinate turns the coordination on (the default once hpa is set).
	// +kubebuilder:default=true
	// +optional
	Coordinate bool `json:"coordinate"`
	// Name is the HorizontalPodAutoscaler's name; empty means the one whose
	// scaleTargetRef is the workload.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// Phase is where a recommendation is in its life.
// +kubebuilder:validation:Enum=Pending;Applied;Watching;Healthy;RolledBack;Blocked;Failed;Degraded
type Phase string

// The phases (docs/design.md section 2).
const (
	// PhasePending is a recommendation not acted on yet.
	PhasePending Phase = "Pending"
	// PhaseApplied means the values were written and the watch has not
	// started.
	PhaseApplied Phase = "Applied"
	// PhaseWatching means the health watch runs.
	PhaseWatching Phase = "Watching"
	// PhaseHealthy means the watch ended without a breach.
	PhaseHealthy Phase = "Healthy"
	// PhaseRolledBack means a breach rolled the change back.
	PhaseRolledBack Phase = "RolledBack"
	// PhaseBlocked means the change is not applied; status.reason says why.
	PhaseBlocked Phase = "Blocked"
	// PhaseFailed means the change could not be applied.
	PhaseFailed Phase = "Failed"
	// PhaseDegraded means too many of the workload's last changes were
	// rolled back (spec.guardrails.degraded): nothing is applied or
	// recommended until a person resumes it or the policy changes;
	// status.degraded has the figures.
	PhaseDegraded Phase = "Degraded"
)

// Reasons for phase Blocked, in status.reason.
const (
	ReasonPaused          = "Paused"
	ReasonFreezeWindow    = "FreezeWindow"
	ReasonCooldown        = "Cooldown"
	ReasonSameValues      = "SameValues"
	ReasonFailedPermanent = "FailedPermanent"
	ReasonNoPolicy        = "NoPolicy"
)

// Reasons for phase Blocked given by the gates a change must pass before
// it is applied (cluster/gates; docs/health.md, "Before a change: the
// gates"). Each names the object that refuses and its figures.
const (
	// ReasonProtectedNamespace: the namespace is one Kerf never changes
	// (the leader's --protected-namespaces).
	ReasonProtectedNamespace = "ProtectedNamespace"
	// ReasonRolloutInProgress: the workload is mid-rollout.
	ReasonRolloutInProgress = "RolloutInProgress"
	// ReasonQoSClass: the change would move the pods to another QoS class
	// and the policy does not allow it.
	ReasonQoSClass = "QoSClass"
	// ReasonPodLevelResources: the containers' new values do not fit the
	// pod-level resources (spec.resources) the pods set.
	ReasonPodLevelResources = "PodLevelResources"
	// ReasonLimitRange: a LimitRange of the namespace would refuse the
	// values.
	ReasonLimitRange = "LimitRange"
	// ReasonResourceQuota: a ResourceQuota has no room for the increase.
	ReasonResourceQuota = "ResourceQuota"
	// ReasonDisruptionBudget: a PodDisruptionBudget allows no disruption
	// and the change restarts pods.
	ReasonDisruptionBudget = "DisruptionBudget"
	// ReasonNodeHeadroom: a node has no free allocatable for an in-place
	// increase of its pod's requests.
	ReasonNodeHeadroom = "NodeHeadroom"
	// ReasonGateUnavailable: a gate could not be evaluated (no permission,
	// an API not served) and the change raises requests of running pods.
	ReasonGateUnavailable = "GateUnavailable"
	// ReasonInvalidValues: the recommendation's values cannot run on the
	// workload: a container its pods lack, a (pod) entry for pods without
	// pod-level resources, or a request above the limit kept.
	ReasonInvalidValues = "InvalidValues"
)

// ReasonWatchRunning is status.reason, and the blocked action's reason,
// while a newer generation of the spec waits for the watch of the change
// already applied to end: the phase stays Watching, and the new values are
// planned once the watch ends healthy or its rollback is restored
// (docs/health.md, "A change while another is watched").
const ReasonWatchRunning = "WatchRunning"

// ReasonDegraded is status.reason in phase Degraded, the reason of the
// blocked action that records the verdict and of its Warning Event.
const ReasonDegraded = "Degraded"

// Reasons of the resume of a Degraded workload, in status.reason and in
// the Normal Event that records it.
const (
	// ReasonResumed: a person resumed it (ResumeAnnotation).
	ReasonResumed = "Resumed"
	// ReasonPolicyChanged: the policy's fingerprint differs from the one
	// recorded with the verdict, or the policy turned the mark off.
	ReasonPolicyChanged = "PolicyChanged"
)

// Condition types on a recommendation.
const (
	// ConditionApplied is true once the values were written.
	ConditionApplied = "Applied"
	// ConditionHealthWatch carries the health watch's state in its reason.
	ConditionHealthWatch = "HealthWatch"
)

// Reasons of the HealthWatch condition (docs/design.md section 3). Every
// reason but Watching and Healthy is a failure: the change is rolled back
// with it as status.reason and as the rolledBack action's reason.
const (
	// HealthWatchWatching: the watch runs; the condition's message says
	// what is not evaluated yet (throttling before its window holds
	// enough periods, or without a throttling source).
	HealthWatchWatching = "Watching"
	// HealthWatchHealthy: the watch ended without a failure; the message
	// says when a signal was never evaluated.
	HealthWatchHealthy = "Healthy"
	// HealthWatchOOMKills: OOM kills reached guardrails.rollback.oomKills.
	HealthWatchOOMKills = "OOMKills"
	// HealthWatchRestarts: restarts reached guardrails.rollback.restarts.
	HealthWatchRestarts = "Restarts"
	// HealthWatchThrottling: the CFS throttling ratio reached
	// guardrails.rollback.throttlingRatio.
	HealthWatchThrottling = "Throttling"
	// HealthWatchNotAdopted: at the watch's end, or as soon as it can no
	// longer be met, too few pods run the applied values (none, or fewer
	// than adoptionThresholdPercent).
	HealthWatchNotAdopted = "NotAdopted"
	// HealthWatchUnschedulable: a pod of the change stayed Pending with
	// PodScheduled=False, reason Unschedulable, for
	// guardrails.rollback.unschedulableGrace.
	HealthWatchUnschedulable = "Unschedulable"
	// HealthWatchInfeasible: the kubelet marked a pod's in-place resize
	// Infeasible (PodResizePending, reason Infeasible) for
	// guardrails.rollback.unschedulableGrace.
	HealthWatchInfeasible = "Infeasible"
)

// Reasons of a failed in-place resize (docs/leader.md): status.reason of
// phase Failed and the failed action's reason when an apply fails, and the
// reason given for a pod a rollback could not resize back.
const (
	// ResizeInfeasible: the kubelet refuses the resize (PodResizePending,
	// reason Infeasible). An apply does not fail on it: the health watch
	// rolls the change back with HealthWatchInfeasible after the grace. A
	// restore gives up on the pod.
	ResizeInfeasible = "Infeasible"
	// ResizeDeferred: the resize stayed PodResizePending, reason Deferred,
	// for the resize timeout or longer.
	ResizeDeferred = "Deferred"
	// ResizeInProgress: the resize stayed PodResizeInProgress for the
	// resize timeout or longer.
	ResizeInProgress = "InProgress"
	// ResizeRejected: the apiserver refused the resize, for instance
	// because it would change the pod's QoS class or exceed the node's
	// allocatable resources.
	ResizeRejected = "Rejected"
)

// Reasons of the Applied condition.
const (
	// AppliedReasonApplying marks a change recorded in status.change whose
	// apply has not finished: a leader that finds it finishes that change
	// (the apply is idempotent) rather than planning a new one.
	AppliedReasonApplying = "Applying"
	// AppliedReasonApplied means the values run (or, for InPlace and
	// Deferred, new pods get them from the webhook).
	AppliedReasonApplied = "Applied"
	// AppliedReasonAlreadyRunning means the values already ran: nothing
	// was changed and there is nothing to watch.
	AppliedReasonAlreadyRunning = "AlreadyRunning"
	// AppliedReasonBlocked means a guardrail holds the apply back.
	AppliedReasonBlocked = "Blocked"
)

// Canary reasons: of the applied action and the Applied condition.
const (
	// ReasonCanary is the applied action's reason when a change went to
	// its canary pods only.
	ReasonCanary = "Canary"
	// ReasonCanaryPromoted is the applied action's reason, and the
	// Applied Event's, when the canary passed and the rest were resized.
	ReasonCanaryPromoted = "CanaryPromoted"
)

// ReasonRollbackError is the reason of a failed action, and of its Event,
// recorded when a restore fails; the restore is retried with exponential
// backoff.
const ReasonRollbackError = "RollbackError"

// Reasons of the Kubernetes Events the leader emits about a change, beside
// ReasonNoPolicy and ReasonRollbackError, which name their Events too
// (docs/design.md section 7).
const (
	// EventApplied: the change was applied.
	EventApplied = "Applied"
	// EventCanaryPromoted: a canary passed its watch and the change went
	// to every pod.
	EventCanaryPromoted = "CanaryPromoted"
	// EventApplyFailed: a pod's in-place resize failed for good.
	EventApplyFailed = "ApplyFailed"
	// EventBlocked: a guardrail holds the apply back.
	EventBlocked = "Blocked"
	// EventRolledBack: a breach was rolled back; emitted on the
	// recommendation and on its workload.
	EventRolledBack = "RolledBack"
	// EventRefused: the recommender held values back; the message has the
	// figures.
	EventRefused = "Refused"
	// EventDegraded (Warning): too many of the workload's last changes
	// were rolled back; it is left alone until resumed.
	EventDegraded = "Degraded"
)

// The reasons of the six Kubernetes Events the backoff state machine emits
// (docs/design.md section 4).
const (
	// EventMonitoringStarted: a change was applied and its turn began.
	EventMonitoringStarted = "MonitoringStarted"
	// EventMonitoringSucceeded: the health watch ended without a breach.
	EventMonitoringSucceeded = "MonitoringSucceeded"
	// EventRollingBackStarted: a breach started a rollback.
	EventRollingBackStarted = "RollingBackStarted"
	// EventBackoffTurnCompleted: a backoff expired and turns remain, so the
	// same values may be tried again.
	EventBackoffTurnCompleted = "BackoffTurnCompleted"
	// EventBackoffExhausted: a backoff expired on the last turn; the values
	// are failedPermanent.
	EventBackoffExhausted = "BackoffExhausted"
	// EventStateCleared: no policy resolved any more, so the state was
	// dropped.
	EventStateCleared = "StateCleared"
)

// The actions of the leader's Kubernetes Events: which part of a
// recommendation's life emitted them.
const (
	// EventActionApply: planning, blocking and applying a change.
	EventActionApply = "Apply"
	// EventActionWatch: the health watch.
	EventActionWatch = "Watch"
	// EventActionRollback: restoring the values after a breach.
	EventActionRollback = "Rollback"
	// EventActionBackoff: the backoff state machine.
	EventActionBackoff = "Backoff"
	// EventActionRecommend: the recommender's making of the values.
	EventActionRecommend = "Recommend"
)

// PausedAnnotation on a RightsizingRecommendation, with value "true",
// pauses its applies as a policy's spec.guardrails.paused does (phase
// Blocked, reason Paused), for that one workload; rollbacks still run.
// `kubectl kerf pause --workload` sets it and `resume --workload` removes it.
const PausedAnnotation = "kerf.dev/paused"

// RollbackStateAnnotation is the workload annotation that mirrors
// status.rollback as JSON (docs/design.md section 4).
const RollbackStateAnnotation = "kerf.dev/rollback-state"

// ResumeAnnotation on a RightsizingRecommendation is an RFC 3339 time:
// a Degraded workload marked at or before it is resumed, and only the
// changes applied from then on count towards the next mark.
// `kubectl kerf resume --workload` sets it to the current time.
const ResumeAnnotation = "kerf.dev/resumed-at"

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

// Change is a change Kerf applied and watches: everything a leader that
// takes over needs to resume the watch with its original start and
// baselines, and to roll it back.
type Change struct {
	// AppliedAt is when the change was applied: T0, the watch's start.
	AppliedAt metav1.Time `json:"appliedAt"`
	// Strategy is the strategy that applied it; a rollback uses the same.
	Strategy Strategy `json:"strategy"`
	// Resources are the resources the change touched: cpu, memory or both.
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Resources []ResourceName `json:"resources,omitempty"`
	// Containers are the previous and applied values per container.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Containers []ContainerChange `json:"containers,omitempty"`
	// Touched are the objects the change wrote: resized pods, the patched
	// workload, the HPA.
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	Touched []TouchedObject `json:"touched,omitempty"`
	// TouchedOmitted counts the touched pods left out of Touched, which
	// keeps every other object and the first pods up to its bound of 1024.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TouchedOmitted int32 `json:"touchedOmitted,omitempty"`
	// HPA is the coordinated HPA's previous and applied CPU target.
	// +optional
	HPA *HPAChange `json:"hpa,omitempty"`
	// ValueFingerprint identifies the applied values.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ValueFingerprint string `json:"valueFingerprint,omitempty"`
	// PolicyFingerprint identifies the policy in force when applied.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	PolicyFingerprint string `json:"policyFingerprint,omitempty"`
	// ThrottlingBaselines are the CFS counters at the start of the
	// throttling window, per pod and container (docs/design.md section 3).
	// +kubebuilder:validation:MaxItems=4096
	// +optional
	ThrottlingBaselines []ThrottlingBaseline `json:"throttlingBaselines,omitempty"`
	// RestartBaselines are the containers' restart counts at appliedAt, so
	// that restarts count from the change on; pods created later count in
	// full (docs/design.md section 3).
	// +kubebuilder:validation:MaxItems=4096
	// +optional
	RestartBaselines []RestartBaseline `json:"restartBaselines,omitempty"`
	// OOMBaselines are the kernel's OOM kill counts of the container
	// instances that ran at appliedAt, as the node agents reported them
	// when the watch started (docs/health.md): kills since the change are
	// an instance's count now less its baseline, so a leader that takes
	// over, or that was down while the kills happened, still counts them.
	// An instance started after appliedAt has none and counts in full.
	// +kubebuilder:validation:MaxItems=4096
	// +optional
	OOMBaselines []OOMBaseline `json:"oomBaselines,omitempty"`
	// Canary, when set, says the change went to canary pods first
	// (spec.guardrails.canary): which, until when, and whether the rest
	// followed. A leader that takes over resumes the canary from it.
	// +optional
	Canary *CanaryState `json:"canary,omitempty"`
}

// CanaryState is where a change's canary stands (docs/health.md,
// "Canary").
type CanaryState struct {
	// Pods are the canary pods' names, the only pods resized until the
	// canary is promoted, and the only ones a breach before then restores.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=253
	Pods []string `json:"pods"`
	// Of is how many pods ran when the canary was chosen.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Of int32 `json:"of,omitempty"`
	// StartedAt is when the canary pods were resized: the canary watch's
	// T0.
	StartedAt metav1.Time `json:"startedAt"`
	// Until is when the canary watch ends and, without a breach, the rest
	// are resized.
	Until metav1.Time `json:"until"`
	// PromotedAt is when the canary passed and the change went to every
	// pod: the full watch's T0 (change.appliedAt from then on).
	// +optional
	PromotedAt *metav1.Time `json:"promotedAt,omitempty"`
}

// Promoted reports whether the canary passed and the change went to every
// pod. A change without a canary counts as promoted.
func (c *Change) Promoted() bool {
	return c == nil || c.Canary == nil || c.Canary.PromotedAt != nil
}

// The limits of a Change.
const (
	// MaxCanaryPods bounds change.canary.pods: a larger canary keeps the
	// first pods in its order.
	MaxCanaryPods = 1024
	// MaxTouched bounds change.touched.
	MaxTouched = 1024
	// MaxBaselines bounds each of change.restartBaselines,
	// change.oomBaselines and change.throttlingBaselines.
	MaxBaselines = 4096
)

// OOMBaseline is one container instance's kernel OOM kill count (the
// memory cgroup's cumulative oom_kill counter) at a point in time.
type OOMBaseline struct {
	// Pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// PodUID is the pod's UID.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// Container is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container"`
	// StartedAt is when the container instance started (its status'
	// state.running.startedAt): with the pod and the container it names
	// the instance, whose counter a restart starts anew. Unset when the
	// agent did not know it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// OOMKills is the instance's count then.
	// +kubebuilder:validation:Minimum=0
	OOMKills int64 `json:"oomKills"`
	// At is when the agent read the count.
	At metav1.Time `json:"at"`
}

// ContainerChange is one container's values before and after a change.
type ContainerChange struct {
	// Name is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Previous are the values before the change.
	// +optional
	Previous Resources `json:"previous,omitempty"`
	// Applied are the values the change applied.
	// +optional
	Applied Resources `json:"applied,omitempty"`
}

// TouchedObject names an object a change wrote, with the resourceVersion
// Kerf's write produced.
type TouchedObject struct {
	// Kind is the object's kind, such as Pod, Deployment or
	// HorizontalPodAutoscaler.
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Name is the object's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace is the object's namespace; empty means the recommendation's.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// ResourceVersion is the object's resourceVersion after Kerf's write.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// HPAChange is a coordinated HPA's CPU utilization target before and after.
type HPAChange struct {
	// Name is the HorizontalPodAutoscaler's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// PreviousTargetCPUUtilization is the target before, in percent.
	// +kubebuilder:validation:Minimum=1
	PreviousTargetCPUUtilization int32 `json:"previousTargetCPUUtilization"`
	// AppliedTargetCPUUtilization is the target applied, in percent.
	// +kubebuilder:validation:Minimum=1
	AppliedTargetCPUUtilization int32 `json:"appliedTargetCPUUtilization"`
}

// RestartBaseline is one container's restart count when a change was
// applied.
type RestartBaseline struct {
	// Pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// PodUID is the pod's UID, so a pod recreated with the same name does
	// not inherit the baseline.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// Container is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container"`
	// RestartCount is status.containerStatuses[].restartCount then.
	// +kubebuilder:validation:Minimum=0
	RestartCount int32 `json:"restartCount"`
}

// Breach is the health-watch breach a rollback is restoring from.
type Breach struct {
	// Reason is OOMKills, Restarts, Throttling, Unschedulable, Infeasible
	// or NotAdopted.
	// +kubebuilder:validation:Enum=OOMKills;Restarts;Throttling;Unschedulable;Infeasible;NotAdopted
	Reason string `json:"reason"`
	// At is when the breach was seen.
	At metav1.Time `json:"at"`
	// Resources are the resources the rollback restores.
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Resources []ResourceName `json:"resources,omitempty"`
	// Figures are the figures that crossed a threshold, e.g.
	// "oomKills 2 ≥ 1".
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Figures []string `json:"figures,omitempty"`
	// Restored is set once the restore was written; until then a leader
	// that takes over finishes it.
	// +optional
	Restored bool `json:"restored,omitempty"`
}

// ThrottlingBaseline is one container's CFS counters (cpu.stat nr_periods
// and nr_throttled) at a point in time.
type ThrottlingBaseline struct {
	// Pod is the pod's name.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// PodUID is the pod's UID; it tells a recreated pod of the same name
	// (a StatefulSet's) from the one the baseline was taken on.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// Container is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container"`
	// Periods is nr_periods.
	// +kubebuilder:validation:Minimum=0
	Periods int64 `json:"periods"`
	// Throttled is nr_throttled.
	// +kubebuilder:validation:Minimum=0
	Throttled int64 `json:"throttled"`
	// At is when the counters were read.
	At metav1.Time `json:"at"`
}

// HealthyValues are values that passed a health watch.
type HealthyValues struct {
	// At is when the watch ended healthy.
	At metav1.Time `json:"at"`
	// ValueFingerprint identifies the values.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ValueFingerprint string `json:"valueFingerprint,omitempty"`
	// Containers are the values per container.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Containers []ContainerResources `json:"containers"`
}

// BackoffState is a state of the rollback backoff state machine
// (docs/design.md section 4).
// +kubebuilder:validation:Enum=monitoring;monitoringSucceeded;rollingBack;backingOff;backedOff;failedPermanent
type BackoffState string

// The backoff states: monitoring → monitoringSucceeded | rollingBack →
// backingOff → backedOff | failedPermanent.
const (
	BackoffMonitoring          BackoffState = "monitoring"
	BackoffMonitoringSucceeded BackoffState = "monitoringSucceeded"
	BackoffRollingBack         BackoffState = "rollingBack"
	BackoffBackingOff          BackoffState = "backingOff"
	BackoffBackedOff           BackoffState = "backedOff"
	BackoffFailedPermanent     BackoffState = "failedPermanent"
)

// RollbackState is the backoff state machine for one value fingerprint.
type RollbackState struct {
	// State is the machine's state.
	State BackoffState `json:"state"`
	// Turn is the current attempt, counted from 1.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Turn int32 `json:"turn,omitempty"`
	// Expiry is when backingOff ends: timePeriod × multiplyByTurn × turn
	// after it began.
	// +optional
	Expiry *metav1.Time `json:"expiry,omitempty"`
	// Fingerprint is the value fingerprint the machine is about.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
	// Policy is the policy that governed the values' latest transition,
	// with its fingerprint: a failedPermanent verdict holds for that
	// policy state only, and a change of the policy (a new fingerprint)
	// reopens the values for a fresh run (docs/design.md section 4).
	// +optional
	Policy *PolicyReference `json:"policy,omitempty"`
	// Reason is why the values' latest turn failed, such as OOMKills;
	// empty while a turn runs and after one passed. Turns keep the reason
	// of every turn.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says the same for people, with the figures.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
	// Restoring are the values a rollback puts back (only the rolled-back
	// resources), per container, while the state is rollingBack or
	// backingOff; cleared when the turn completes (backedOff or
	// failedPermanent). A field absent from a container is removed.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Restoring []ContainerResources `json:"restoring,omitempty"`
	// LastKnownGood are the last values that passed a health watch
	// (status.lastHealthy), kept across fingerprints.
	// +optional
	LastKnownGood *HealthyValues `json:"lastKnownGood,omitempty"`
	// Turns are the turns so far, oldest first.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Turns []BackoffTurn `json:"turns,omitempty"`
}

// The limits of a RollbackState.
const (
	// MaxRollbackMessageLength bounds rollback.message.
	MaxRollbackMessageLength = 4096
	// MaxTurns bounds rollback.turns: the newest turns are kept.
	MaxTurns = 100
)

// BackoffTurn is one attempt of the same values.
type BackoffTurn struct {
	// Turn is the attempt's number, from 1.
	// +kubebuilder:validation:Minimum=1
	Turn int32 `json:"turn"`
	// StartedAt is when the attempt's change was applied.
	StartedAt metav1.Time `json:"startedAt"`
	// EndedAt is when the attempt ended; absent while it runs.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty"`
	// Outcome is how it ended, such as Healthy or RolledBack.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// Reason is the breach that ended it, such as OOMKills.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
}

// MaxOutcomeLength bounds a BackoffTurn's outcome.
const MaxOutcomeLength = 64

// The outcomes recorded on a BackoffTurn when it ends.
const (
	// OutcomeHealthy: the turn's health watch ended without a breach.
	OutcomeHealthy = "Healthy"
	// OutcomeRolledBack: a breach rolled the turn's change back.
	OutcomeRolledBack = "RolledBack"
)

// Cooldown blocks decreases of one resource until a time.
type Cooldown struct {
	// Resource is cpu or memory.
	Resource ResourceName `json:"resource"`
	// Until is when decreases are allowed again.
	Until metav1.Time `json:"until"`
}

// ActionType is the type of an action in the history.
// +kubebuilder:validation:Enum=applied;rolled_back;failed;healthy;blocked;refused
type ActionType string

// The action types; the same words label kerf_actions_total{type}.
const (
	ActionApplied    ActionType = "applied"
	ActionRolledBack ActionType = "rolled_back"
	ActionFailed     ActionType = "failed"
	ActionHealthy    ActionType = "healthy"
	ActionBlocked    ActionType = "blocked"
	// ActionRefused: the recommender held values back (a latch or
	// upscale-only kept a resource from going down); Refusals has the
	// figures (docs/recommender.md).
	ActionRefused ActionType = "refused"
)

// ActionTypes are every action type, in the order messages and filters
// list them.
var ActionTypes = []ActionType{ActionApplied, ActionRolledBack, ActionFailed, ActionHealthy, ActionBlocked, ActionRefused}

// Action is one thing Kerf did to a workload.
type Action struct {
	// Seq numbers the recommendation's actions from 1, in the order they
	// were recorded. It outlives the trim of the oldest entries, so the
	// hub forwarder's delivered-up-to cursor and idempotency keys name
	// one action forever, and a gap before history[0].seq counts the
	// actions trimmed away. 0 on entries recorded before it existed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Seq int64 `json:"seq,omitempty"`
	// Time is when it happened.
	Time metav1.Time `json:"time"`
	// Type is applied, rolled_back, failed, healthy, blocked or refused.
	Type ActionType `json:"type"`
	// Reason is a CamelCase word, such as OOMKills or RollbackError.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for people.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Message string `json:"message,omitempty"`
	// Resources are the resources the action touched.
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Resources []ResourceName `json:"resources,omitempty"`
	// Containers are the old and new values per container.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Containers []ContainerValueChange `json:"containers,omitempty"`
	// Figures are the figures that crossed a threshold, such as
	// "oomKills 2 ≥ 1".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	Figures []string `json:"figures,omitempty"`
	// Refusals are the values the recommender held back, with their
	// figures, on a refused action.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Refusals []Refusal `json:"refusals,omitempty"`
}

// The limits of an Action; MaxFigures bounds a Breach's figures too.
const (
	// MaxActionMessageLength bounds an action's message.
	MaxActionMessageLength = 4096
	// MaxActionContainers bounds an action's containers.
	MaxActionContainers = 64
	// MaxFigures bounds an action's figures and MaxFigureLength each one.
	MaxFigures      = 16
	MaxFigureLength = 256
	// MaxActionRefusals bounds a refused action's refusals.
	MaxActionRefusals = 16
)

// Refusal is one value the recommender did not recommend, and why: the
// figures of recommend.Refusal (docs/recommender.md).
type Refusal struct {
	// Container is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container"`
	// Resource is cpu or memory.
	Resource ResourceName `json:"resource"`
	// Field is request or limit.
	// +kubebuilder:validation:Enum=request;limit
	Field string `json:"field"`
	// Reason is OOMKill, Throttled, Cooldown, FailedPermanent,
	// UpscaleOnly, or WatchRunning (the change is still watched: the
	// recommender asks for nothing new until the watch ends).
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// Asked is what the estimator asked for, in millicores or bytes.
	Asked int64 `json:"asked"`
	// Held is what was recommended instead, in millicores or bytes.
	Held int64 `json:"held"`
	// Observed is the figure behind the reason: the throttling ratio, the
	// OOM peak in bytes, or the current value; a decimal string.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Observed string `json:"observed,omitempty"`
	// Threshold is what Observed was held against: the throttlingRatio or
	// the OOM floor in bytes; a decimal string, empty when there is none.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Threshold string `json:"threshold,omitempty"`
	// At is when the OOM kill happened, for OOMKill.
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// The limits of a Refusal.
const (
	// MaxRefusalReasonLength bounds a refusal's reason.
	MaxRefusalReasonLength = 64
	// MaxRefusalFigureLength bounds a refusal's observed and threshold.
	MaxRefusalFigureLength = 32
)

// ContainerValueChange is one container's old and new values in an action.
type ContainerValueChange struct {
	// Name is the container's name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Old are the values before the action.
	// +optional
	Old Resources `json:"old,omitempty"`
	// New are the values after it.
	// +optional
	New Resources `json:"new,omitempty"`
}

// The marks of a recommendation Kerf's recommender made (docs/recommender.md).
const (
	// RecommendedByLabel is the label the recommender puts on the
	// recommendations it makes, with value RecommendedByKerf. It updates
	// only recommendations that carry it, so it never overwrites one a
	// person or another tool wrote.
	RecommendedByLabel = "kerf.dev/recommended-by"
	// RecommendedByKerf is RecommendedByLabel's value.
	RecommendedByKerf = "kerf"
	// RecommendationBasisAnnotation carries, as JSON, the figures the
	// recommender made the values from (percentiles, samples, history,
	// confidence, per container) and the values it refused to recommend
	// with why (the latches and guards that held).
	RecommendationBasisAnnotation = "kerf.dev/recommendation-basis"
)
