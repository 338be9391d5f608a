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
	// keeping the manifest's limit/request ratio. False, the default,
	// leaves limits as the manifest has them (raised only to stay at or
	// above the request), as VPA's controlledValues RequestsOnly: a lower
	// request saves, a lower limit only risks OOM kills and throttling.
	// A Guaranteed pod's limits follow its requests either way, so it
	// stays Guaranteed.
	// +kubebuilder:default=false
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
