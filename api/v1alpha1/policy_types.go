package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RightsizingPolicy selects workloads in its own namespace and sets their
// guardrails (docs/design.md section 2). Without a matching policy a
// workload's changes are not applied, watched or rolled back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=kerf
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.guardrails.paused`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`!has(self.spec) || !has(self.spec.selector) || !has(self.spec.selector.namespaceSelector)`,message="a RightsizingPolicy selects only in its own namespace; use a ClusterRightsizingPolicy to select namespaces",fieldPath=".spec.selector.namespaceSelector"
type RightsizingPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec selects workloads and sets the guardrails.
	// +kubebuilder:default={}
	// +optional
	Spec PolicySpec `json:"spec"`
	// Status is what the leader saw of the policy.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// RightsizingPolicyList is a list of RightsizingPolicies.
// +kubebuilder:object:root=true
type RightsizingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []RightsizingPolicy `json:"items"`
}

// ClusterRightsizingPolicy selects workloads in any namespace and sets their
// guardrails. A RightsizingPolicy of equal weight beats it. Kerf ships one
// named default that selects everything.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=kerf
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.guardrails.paused`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterRightsizingPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec selects workloads and sets the guardrails.
	// +kubebuilder:default={}
	// +optional
	Spec PolicySpec `json:"spec"`
	// Status is what the leader saw of the policy.
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// ClusterRightsizingPolicyList is a list of ClusterRightsizingPolicies.
// +kubebuilder:object:root=true
type ClusterRightsizingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the policies.
	Items []ClusterRightsizingPolicy `json:"items"`
}

// PolicySpec is the spec of RightsizingPolicy and ClusterRightsizingPolicy.
type PolicySpec struct {
	// Selector picks the workloads the policy governs; omitted, it picks
	// every workload in its scope.
	// +optional
	Selector PolicySelector `json:"selector,omitempty"`
	// Weight orders policies that select the same workload: the highest
	// wins, then a RightsizingPolicy over a ClusterRightsizingPolicy, then
	// the oldest.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	Weight int32 `json:"weight,omitempty"`
	// Guardrails say when changes may be applied and when they roll back.
	// +kubebuilder:default={}
	// +optional
	Guardrails Guardrails `json:"guardrails,omitempty"`
	// Recommend turns on Kerf's own recommender for the workloads the
	// policy governs (docs/recommender.md): it writes their
	// RightsizingRecommendations from the usage the agents read, never
	// lowering a throttled or OOM-killed resource. Omitted, nothing is
	// recommended. It is not part of the policy's fingerprint, which
	// identifies the guardrails.
	// +optional
	Recommend *RecommendSpec `json:"recommend,omitempty"`
}

// RecommendSpec configures the recommender for a policy's workloads; every
// field has a default, and the ones that map to the recommender's
// parameters are named after them or after VPA's recommender flags
// (docs/recommender.md).
// +kubebuilder:validation:XValidation:rule=`!has(self.lowerPercentile) || !has(self.upperPercentile) || self.lowerPercentile <= self.upperPercentile`,message="must not be above upperPercentile",fieldPath=".lowerPercentile"
type RecommendSpec struct {
	// Enabled turns the recommender on for the policy's workloads.
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`
	// Strategy is the strategy of the recommendations it writes: InPlace,
	// Rollout or Deferred.
	// +kubebuilder:default=InPlace
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`
	// Interval is how often a workload's recommendation is made again.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('1s')`,message="must be a duration of at least 1s such as 5m (units ns, us, ms, s, m, h)"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// MinHistory is how long a workload's usage history must be before
	// anything is recommended for it.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s')`,message="must be a duration such as 24h or 0 (units ns, us, ms, s, m, h)"
	// +optional
	MinHistory *metav1.Duration `json:"minHistory,omitempty"`
	// MinChangePercent is the smallest change of a request, in percent of
	// the current value, that is recommended; smaller changes keep the
	// current values.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99
	// +optional
	MinChangePercent *int32 `json:"minChangePercent,omitempty"`
	// CPUPercentile is the CPU usage percentile the CPU target starts
	// from (the recommender's CPUPercentile, VPA's 90).
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	CPUPercentile *int32 `json:"cpuPercentile,omitempty"`
	// MemoryPercentile is the memory peak percentile the memory target
	// starts from (the recommender's MemoryPercentile, VPA's 90).
	// +kubebuilder:default=90
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	MemoryPercentile *int32 `json:"memoryPercentile,omitempty"`
	// SafetyMarginPercent is added to every percentile, in percent (the
	// recommender's SafetyMargin, VPA's 15).
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	SafetyMarginPercent *int32 `json:"safetyMarginPercent,omitempty"`
	// UpscaleOnly are the resources whose request and limit the
	// recommender only ever raises, such as [memory]; empty, both may go
	// down.
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +optional
	UpscaleOnly []ResourceName `json:"upscaleOnly,omitempty"`
	// KeepLimitProportion scales a container's limit with its request,
	// keeping the manifest's limit/request ratio; false leaves limits as
	// the manifest has them (raised only to stay at or above the request).
	// +kubebuilder:default=true
	// +optional
	KeepLimitProportion *bool `json:"keepLimitProportion,omitempty"`
	// Containers bound the requests recommended per container name, as the
	// Vertical Pod Autoscaler's containerPolicies do; the entry named "*"
	// applies to the containers no other entry names.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Containers []ContainerRecommendPolicy `json:"containers,omitempty"`
	// Source is where the targets come from: Kerf (its own recommender,
	// from the usage the agents read) or VPA (the target in the status of
	// the workload's VerticalPodAutoscaler in updateMode Off or Initial).
	// Either way the same latches and guards apply after it.
	// +kubebuilder:default=Kerf
	// +kubebuilder:validation:Enum=Kerf;VPA
	// +optional
	Source RecommendSource `json:"source,omitempty"`

	// LowerPercentile is the usage percentile of the lower bound a
	// recommendation records, for CPU and memory (VPA's
	// --recommendation-lower-bound-cpu-percentile and -memory-percentile,
	// 50). The bounds are figures only: they show how settled the
	// estimate is and change nothing.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	LowerPercentile *int32 `json:"lowerPercentile,omitempty"`
	// UpperPercentile is the usage percentile of the upper bound a
	// recommendation records, for CPU and memory (VPA's
	// --recommendation-upper-bound-cpu-percentile and -memory-percentile,
	// 95).
	// +kubebuilder:default=95
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	UpperPercentile *int32 `json:"upperPercentile,omitempty"`
	// ConfidenceInterval is the history length that counts as one unit of
	// confidence for the recorded bounds (VPA's --confidence-interval-cpu
	// and --confidence-interval-memory, 24h).
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('8760h')`,message="must be a duration from 1m to 8760h such as 24h (units ns, us, ms, s, m, h)"
	// +optional
	ConfidenceInterval *metav1.Duration `json:"confidenceInterval,omitempty"`
	// PodMinimum is the least request recommended for a pod, shared by its
	// containers (VPA's --pod-recommendation-min-cpu-millicores, 25m, and
	// --pod-recommendation-min-memory-mb, 250Mi). Zero is no minimum.
	// +kubebuilder:default={}
	// +optional
	PodMinimum *PodMinimum `json:"podMinimum,omitempty"`
	// OOMBump is how far above its peak a container's memory request goes
	// after an OOM kill: at least the peak plus memory and the peak plus
	// percent (VPA's --oom-min-bump-up-bytes, 100Mi, and
	// --oom-bump-up-ratio, 1.2).
	// +kubebuilder:default={}
	// +optional
	OOMBump *OOMBump `json:"oomBump,omitempty"`
	// CPUHalfLife is the time after which a CPU usage sample counts half
	// (VPA's --cpu-histogram-decay-half-life, 24h). It shapes the stored
	// history: a change restarts the history of the policy's workloads.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('8760h')`,message="must be a duration from 1m to 8760h such as 24h (units ns, us, ms, s, m, h)"
	// +optional
	CPUHalfLife *metav1.Duration `json:"cpuHalfLife,omitempty"`
	// MemoryHalfLife is the time after which a memory peak counts half
	// (VPA's --memory-histogram-decay-half-life, 24h). It shapes the
	// stored history: a change restarts the history of the policy's
	// workloads.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('8760h')`,message="must be a duration from 1m to 8760h such as 24h (units ns, us, ms, s, m, h)"
	// +optional
	MemoryHalfLife *metav1.Duration `json:"memoryHalfLife,omitempty"`
	// MemoryAggregationInterval is the length of one memory interval: the
	// history keeps one peak per container instance per interval (VPA's
	// --memory-aggregation-interval, 24h). It shapes the stored history.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('8760h')`,message="must be a duration from 1m to 8760h such as 24h (units ns, us, ms, s, m, h)"
	// +optional
	MemoryAggregationInterval *metav1.Duration `json:"memoryAggregationInterval,omitempty"`
	// MemoryAggregationIntervals is how many intervals make the lookback
	// window of memory peaks and of the OOM and throttling latches (VPA's
	// --memory-aggregation-interval-count, 8). It shapes the stored
	// history.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	// +optional
	MemoryAggregationIntervals *int32 `json:"memoryAggregationIntervals,omitempty"`
}

// PodMinimum is the least request the recommender gives a pod, shared by
// its containers.
type PodMinimum struct {
	// CPU is the pod's least CPU request, such as 25m; 0 is no minimum.
	// +kubebuilder:default="25m"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('0')) >= 0`,message="must be a quantity of at least 0 such as 25m"
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is the pod's least memory request, such as 250Mi; 0 is no
	// minimum.
	// +kubebuilder:default="250Mi"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('0')) >= 0`,message="must be a quantity of at least 0 such as 250Mi"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// OOMBump is how far above the peak an OOM-killed container's memory
// request goes: at least peak + Memory and peak × (1 + Percent/100).
type OOMBump struct {
	// Memory is the least amount added to the peak, such as 100Mi.
	// +kubebuilder:default="100Mi"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('0')) >= 0`,message="must be a quantity of at least 0 such as 100Mi"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Percent is the least the peak is raised by, in percent of it (20:
	// VPA's ratio 1.2).
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Percent *int32 `json:"percent,omitempty"`
}

// ContainerRecommendPolicy bounds the requests the recommender gives one
// container (after VPA's ContainerResourcePolicy): a request is never
// recommended below minAllowed or above maxAllowed, except that a latch
// never lowers a value below its current one.
// +kubebuilder:validation:XValidation:rule=`!has(self.minAllowed) || !has(self.maxAllowed) || !has(self.minAllowed.cpu) || !has(self.maxAllowed.cpu) || !isQuantity(string(self.minAllowed.cpu)) || !isQuantity(string(self.maxAllowed.cpu)) || quantity(string(self.minAllowed.cpu)).compareTo(quantity(string(self.maxAllowed.cpu))) <= 0`,message="must not be above maxAllowed.cpu",messageExpression=`'must not be above maxAllowed.cpu (' + string(self.maxAllowed.cpu) + ')'`,fieldPath=".minAllowed.cpu"
// +kubebuilder:validation:XValidation:rule=`!has(self.minAllowed) || !has(self.maxAllowed) || !has(self.minAllowed.memory) || !has(self.maxAllowed.memory) || !isQuantity(string(self.minAllowed.memory)) || !isQuantity(string(self.maxAllowed.memory)) || quantity(string(self.minAllowed.memory)).compareTo(quantity(string(self.maxAllowed.memory))) <= 0`,message="must not be above maxAllowed.memory",messageExpression=`'must not be above maxAllowed.memory (' + string(self.maxAllowed.memory) + ')'`,fieldPath=".minAllowed.memory"
// +kubebuilder:validation:XValidation:rule=`has(self.minAllowed) || has(self.maxAllowed)`,message="set minAllowed, maxAllowed or both"
type ContainerRecommendPolicy struct {
	// Name is the container's name in the pod template, or "*" for every
	// container no other entry names.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self == '*' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="must be a container name (lower-case letters, digits and '-') or '*'"
	Name string `json:"name"`
	// MinAllowed is the least request recommended; an absent value is no
	// bound.
	// +kubebuilder:validation:XValidation:rule=`has(self.cpu) || has(self.memory)`,message="set cpu, memory or both"
	// +kubebuilder:validation:XValidation:rule=`!has(self.cpu) || !isQuantity(string(self.cpu)) || quantity(string(self.cpu)).isGreaterThan(quantity('0'))`,message="must be a positive quantity such as 50m",fieldPath=".cpu"
	// +kubebuilder:validation:XValidation:rule=`!has(self.memory) || !isQuantity(string(self.memory)) || quantity(string(self.memory)).isGreaterThan(quantity('0'))`,message="must be a positive quantity such as 64Mi",fieldPath=".memory"
	// +optional
	MinAllowed *ResourceValues `json:"minAllowed,omitempty"`
	// MaxAllowed is the most request recommended; an absent value is no
	// bound. The OOM latch's bump stops at it too, but never lowers the
	// current value.
	// +kubebuilder:validation:XValidation:rule=`has(self.cpu) || has(self.memory)`,message="set cpu, memory or both"
	// +kubebuilder:validation:XValidation:rule=`!has(self.cpu) || !isQuantity(string(self.cpu)) || quantity(string(self.cpu)).isGreaterThan(quantity('0'))`,message="must be a positive quantity such as 2",fieldPath=".cpu"
	// +kubebuilder:validation:XValidation:rule=`!has(self.memory) || !isQuantity(string(self.memory)) || quantity(string(self.memory)).isGreaterThan(quantity('0'))`,message="must be a positive quantity such as 4Gi",fieldPath=".memory"
	// +optional
	MaxAllowed *ResourceValues `json:"maxAllowed,omitempty"`
}

// ContainerPolicy returns the entry of spec.recommend.containers for the
// container name: the one that names it, else the "*" one, else nil.
func (r *RecommendSpec) ContainerPolicy(name string) *ContainerRecommendPolicy {
	var star *ContainerRecommendPolicy
	for i := range r.Containers {
		switch r.Containers[i].Name {
		case name:
			return &r.Containers[i]
		case "*":
			star = &r.Containers[i]
		}
	}
	return star
}

// PolicySelector picks workloads. Every part that is set must match; a part
// omitted matches everything.
type PolicySelector struct {
	// NamespaceSelector picks namespaces by label (ClusterRightsizingPolicy
	// only).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// WorkloadSelector picks workloads by their own labels.
	// +optional
	WorkloadSelector *metav1.LabelSelector `json:"workloadSelector,omitempty"`
	// Kinds limits the policy to these workload kinds.
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	// +optional
	Kinds []WorkloadKind `json:"kinds,omitempty"`
}

// Guardrails say when changes may be applied and when they roll back.
// Pause and freeze windows block applies, never rollbacks.
type Guardrails struct {
	// Paused blocks every apply (phase Blocked, reason Paused).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// FreezeWindows block applies while one is open (phase Blocked, reason
	// FreezeWindow).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	FreezeWindows []FreezeWindow `json:"freezeWindows,omitempty"`
	// AllowQoSChange lets a Rollout change move the pods to another QoS
	// class (Guaranteed, Burstable, BestEffort). Without it such a change
	// is blocked (reason QoSClass). An InPlace change never may: the
	// apiserver refuses a resize that changes the class.
	// +optional
	AllowQoSChange bool `json:"allowQoSChange,omitempty"`
	// Rollback sets the health watch's thresholds and what follows a
	// rollback.
	// +kubebuilder:default={}
	// +optional
	Rollback RollbackGuardrails `json:"rollback,omitempty"`
	// Canary, when set, applies an InPlace change to some pods first and
	// watches them for its duration before the rest are resized
	// (docs/health.md, "Canary"). Rollout and Deferred changes apply whole.
	// +optional
	Canary *CanaryGuardrails `json:"canary,omitempty"`
	// Degraded marks a workload Degraded when rolledBack of its last
	// `of` changes were rolled back: Kerf then leaves it alone until a
	// person resumes it or the policy changes (docs/health.md). Absent
	// means the defaults, 3 of 5.
	// +optional
	Degraded *DegradedGuardrails `json:"degraded,omitempty"`
}

// CanaryGuardrails say which share of a workload's pods an InPlace change
// goes to first, and for how long they are watched alone.
// +kubebuilder:validation:XValidation:rule=`has(self.pods) != has(self.percent)`,message="spec.guardrails.canary: set exactly one of pods and percent"
type CanaryGuardrails struct {
	// Pods is how many pods are the canary.
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="spec.guardrails.canary.pods must be at least 1"
	// +optional
	Pods *int32 `json:"pods,omitempty"`
	// Percent is the share of the running pods that are the canary, rounded
	// up to a whole pod.
	// +kubebuilder:validation:XValidation:rule=`self >= 1 && self <= 100`,message="spec.guardrails.canary.percent must be between 1 and 100"
	// +optional
	Percent *int32 `json:"percent,omitempty"`
	// Duration is how long the canary pods are watched before the rest
	// are resized.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="spec.guardrails.canary.duration must be a positive duration such as 10m (units ns, us, ms, s, m, h)"
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// DegradedOrDefault is spec.guardrails.degraded with its defaults filled
// in, the defaults themselves when it is absent.
func (g *Guardrails) DegradedOrDefault() DegradedGuardrails {
	var d DegradedGuardrails
	if g.Degraded != nil {
		d = *g.Degraded.DeepCopy()
	}
	d.SetDefaults()
	return d
}

// DegradedGuardrails say when a workload whose changes keep being rolled
// back is marked Degraded (phase Degraded, docs/health.md "A workload
// that keeps failing").
// +kubebuilder:validation:XValidation:rule=`!has(self.rolledBack) || !has(self.of) || self.rolledBack <= self.of`,message="must not be above of",fieldPath=".rolledBack"
type DegradedGuardrails struct {
	// Disabled turns the mark off: no workload of the policy is marked
	// Degraded, and one marked already is resumed.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// RolledBack is how many of the last `of` changes must have been
	// rolled back for the mark, from 1 to `of`.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	// +optional
	RolledBack *int32 `json:"rolledBack,omitempty"`
	// Of is how many of the workload's last changes are counted, from 1
	// to 20. Twenty changes fit in status.history's 100 entries: a change
	// leaves its applied and rolled_back or healthy entries, and the
	// blocks and refusals between two changes rarely number more than
	// three.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	// +optional
	Of *int32 `json:"of,omitempty"`
}

// FreezeWindow is a recurring time during which no change is applied.
type FreezeWindow struct {
	// Schedule is when the window opens, a cron expression of 5 fields
	// (minute hour day-of-month month day-of-week), such as "0 9 * * 1-5".
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[ ]*[-0-9A-Za-z*?,/#]+([ ]+[-0-9A-Za-z*?,/#]+){4}[ ]*$')`,message="must be a cron schedule of 5 space-separated fields (minute hour day-of-month month day-of-week), such as '0 9 * * 1-5'"
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open, such as 2h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 2h or 90m (units ns, us, ms, s, m, h)"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is the IANA time zone of the schedule, such as Europe/Paris.
	// The apiserver refuses a zone its time zone database does not know
	// (kube-apiserver embeds Go's); the leader checks again with its own.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z][-A-Za-z0-9_+]*(/[-A-Za-z0-9_+]+)*$') && self != 'Local'`,message="must be an IANA time zone name such as UTC or Europe/Paris"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[A-Za-z][-A-Za-z0-9_+]*(/[-A-Za-z0-9_+]+)*$') || self == 'Local' || timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0`,message="must be a time zone of the IANA database such as UTC or Europe/Paris"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// RestoreTarget says which values a rollback restores.
// +kubebuilder:validation:Enum=Previous;LastHealthy;Manifest
type RestoreTarget string

// The restore targets.
const (
	// RestorePrevious restores the values the change replaced.
	RestorePrevious RestoreTarget = "Previous"
	// RestoreLastHealthy restores the last values that passed a health
	// watch (status.lastHealthy), or the previous ones when there are none.
	RestoreLastHealthy RestoreTarget = "LastHealthy"
	// RestoreManifest restores the values the workload's own manifest
	// declares, without Kerf's changes.
	RestoreManifest RestoreTarget = "Manifest"
)

// RollbackGuardrails are the health watch's thresholds and what follows a
// rollback (docs/design.md sections 3 and 4). Every field is optional; the
// defaults are in defaults.go and in the schema.
type RollbackGuardrails struct {
	// WatchDuration is how long the health watch lasts after a change.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30m or 1h30m (units ns, us, ms, s, m, h)"
	// +optional
	WatchDuration *metav1.Duration `json:"watchDuration,omitempty"`
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
	// RestoreTo says which values a rollback restores: Previous,
	// LastHealthy or Manifest.
	// +kubebuilder:default=Previous
	// +optional
	RestoreTo RestoreTarget `json:"restoreTo,omitempty"`
	// AdoptionThresholdPercent is the share of the workload's pods that must
	// run the applied values for the watch to end Healthy; below it the
	// change is rolled back (reason NotAdopted). 0 requires no share, but
	// a watch that ends with no pod running the values is never Healthy.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	AdoptionThresholdPercent int32 `json:"adoptionThresholdPercent,omitempty"`
	// UnschedulableGrace is how long a pod of the change may stay Pending
	// and Unschedulable, or its in-place resize Infeasible, before the
	// change is rolled back (reasons Unschedulable and Infeasible) without
	// waiting for the watch's end.
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 1m or 90s (units ns, us, ms, s, m, h)"
	// +optional
	UnschedulableGrace *metav1.Duration `json:"unschedulableGrace,omitempty"`
	// Backoff says when the same values may be tried again after a
	// rollback.
	// +kubebuilder:default={}
	// +optional
	Backoff Backoff `json:"backoff,omitempty"`
}

// Backoff says when the same values may be tried again after a rollback:
// turn n backs off for timePeriod × multiplyByTurn × n, and after
// maxAttempts turns the values are failedPermanent.
type Backoff struct {
	// TimePeriod is the base backoff.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 10m (units ns, us, ms, s, m, h)"
	// +optional
	TimePeriod *metav1.Duration `json:"timePeriod,omitempty"`
	// MultiplyByTurn multiplies the backoff by the turn number.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MultiplyByTurn int32 `json:"multiplyByTurn,omitempty"`
	// MaxAttempts is how many times the same values are tried; 1 means they
	// are never applied again after a rollback.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
}

// PolicyStatus is what the leader saw of a policy.
type PolicyStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Fingerprint identifies the policy's guardrails; recommendations
	// record it when the policy is chosen.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
}

// RecommendSource is where spec.recommend takes its targets from.
type RecommendSource string

// The recommendation sources.
const (
	// RecommendSourceKerf is Kerf's own recommender.
	RecommendSourceKerf RecommendSource = "Kerf"
	// RecommendSourceVPA is the target of the workload's
	// VerticalPodAutoscaler (docs/recommender.md, "VPA as a source").
	RecommendSourceVPA RecommendSource = "VPA"
)
