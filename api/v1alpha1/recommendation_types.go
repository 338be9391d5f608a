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
