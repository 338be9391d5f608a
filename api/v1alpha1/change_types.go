package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
// +kubebuilder:validation:Enum=applied;rolled_back;failed;healthy;blocked;refused;resumed
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
	// ActionResumed: a Degraded workload was let go again, by a person
	// (ReasonResumed, ResumeAnnotation) or a change of its policy
	// (ReasonPolicyChanged); its changes count anew from here.
	ActionResumed ActionType = "resumed"
)

// ActionTypes are every action type, in the order messages and filters
// list them.
var ActionTypes = []ActionType{ActionApplied, ActionRolledBack, ActionFailed, ActionHealthy, ActionBlocked, ActionRefused, ActionResumed}

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
	// RecommendationRefusalsAnnotation carries the basis's refusals in
	// short (RecommendationBasis.RefusalKeys): what the leader compares
	// on every pass. The leader's cache keeps it and drops the basis
	// beside it; what needs the figures reads the object from the
	// apiserver (docs/leader.md).
	RecommendationRefusalsAnnotation = "kerf.dev/recommendation-refusals"
)
