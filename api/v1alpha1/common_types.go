package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// WorkloadKind is a kind of workload Kerf can manage (apps/v1).
// +kubebuilder:validation:Enum=Deployment;StatefulSet;DaemonSet
type WorkloadKind string

// The workload kinds Kerf manages.
const (
	KindDeployment  WorkloadKind = "Deployment"
	KindStatefulSet WorkloadKind = "StatefulSet"
	KindDaemonSet   WorkloadKind = "DaemonSet"
)

// Strategy says how a recommendation's values reach the pods
// (docs/design.md section 2).
// +kubebuilder:validation:Enum=InPlace;Rollout;Deferred
type Strategy string

// The strategies.
const (
	// StrategyInPlace resizes running pods through the pods/resize
	// subresource; new pods get the values from the admission webhook.
	StrategyInPlace Strategy = "InPlace"
	// StrategyRollout patches the workload's pod template.
	StrategyRollout Strategy = "Rollout"
	// StrategyDeferred lets the values reach pods only when pods are
	// (re)created, through the admission webhook; the template is patched
	// only when the workload's update strategy is OnDelete.
	StrategyDeferred Strategy = "Deferred"
)

// ResourceName is a resource Kerf changes and watches: cpu or memory.
// +kubebuilder:validation:Enum=cpu;memory
type ResourceName string

// The resources Kerf changes.
const (
	ResourceCPU    ResourceName = "cpu"
	ResourceMemory ResourceName = "memory"
)

// ResourceValues is an amount of CPU and of memory, as in a container's
// requests or limits. An absent value is left as the workload has it.
type ResourceValues struct {
	// CPU is an amount of CPU, such as 250m or 2.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory is an amount of memory, such as 512Mi.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// Resources is a container's CPU and memory requests and limits.
type Resources struct {
	// Requests are the container's resource requests.
	// +optional
	Requests *ResourceValues `json:"requests,omitempty"`
	// Limits are the container's resource limits.
	// +optional
	Limits *ResourceValues `json:"limits,omitempty"`
}

// PodLevel is the name of the entry that holds a pod's own resources
// (spec.resources, pod-level resources) among its containers' entries. No
// container can bear it: Kubernetes names containers with DNS labels, which
// have no parentheses. Like VPA's containerName "*", it keeps one list.
const PodLevel = "(pod)"

// ContainerResources names a container and gives the requests and limits
// it should have. Values may not be negative, and where both are set a
// limit may not be below its request (Kubernetes would refuse the pod).
// The entry named PodLevel, (pod), gives the pod-level resources
// (spec.resources) instead.
// +kubebuilder:validation:XValidation:rule=`has(self.requests) || has(self.limits)`,message="set requests, limits or both"
// +kubebuilder:validation:XValidation:rule=`!has(self.requests) || !has(self.limits) || !has(self.requests.cpu) || !has(self.limits.cpu) || !isQuantity(string(self.limits.cpu)) || !isQuantity(string(self.requests.cpu)) || quantity(string(self.limits.cpu)).compareTo(quantity(string(self.requests.cpu))) >= 0`,message="must not be below requests.cpu",messageExpression=`'must not be below requests.cpu (' + string(self.requests.cpu) + ')'`,fieldPath=".limits.cpu"
// +kubebuilder:validation:XValidation:rule=`!has(self.requests) || !has(self.limits) || !has(self.requests.memory) || !has(self.limits.memory) || !isQuantity(string(self.limits.memory)) || !isQuantity(string(self.requests.memory)) || quantity(string(self.limits.memory)).compareTo(quantity(string(self.requests.memory))) >= 0`,message="must not be below requests.memory",messageExpression=`'must not be below requests.memory (' + string(self.requests.memory) + ')'`,fieldPath=".limits.memory"
type ContainerResources struct {
	// Name is the container's name in the pod template, or (pod) for the
	// pod-level resources (spec.resources).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self == '(pod)' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="must be a container name (lower-case letters, digits and '-') or (pod) for the pod-level resources"
	Name string `json:"name"`
	// Requests are the container's resource requests.
	// +kubebuilder:validation:XValidation:rule=`has(self.cpu) || has(self.memory)`,message="set cpu, memory or both"
	// +kubebuilder:validation:XValidation:rule=`!has(self.cpu) || !isQuantity(string(self.cpu)) || !quantity(string(self.cpu)).isLessThan(quantity('0'))`,message="must not be negative",fieldPath=".cpu"
	// +kubebuilder:validation:XValidation:rule=`!has(self.memory) || !isQuantity(string(self.memory)) || !quantity(string(self.memory)).isLessThan(quantity('0'))`,message="must not be negative",fieldPath=".memory"
	// +optional
	Requests *ResourceValues `json:"requests,omitempty"`
	// Limits are the container's resource limits.
	// +kubebuilder:validation:XValidation:rule=`has(self.cpu) || has(self.memory)`,message="set cpu, memory or both"
	// +kubebuilder:validation:XValidation:rule=`!has(self.cpu) || !isQuantity(string(self.cpu)) || !quantity(string(self.cpu)).isLessThan(quantity('0'))`,message="must not be negative",fieldPath=".cpu"
	// +kubebuilder:validation:XValidation:rule=`!has(self.memory) || !isQuantity(string(self.memory)) || !quantity(string(self.memory)).isLessThan(quantity('0'))`,message="must not be negative",fieldPath=".memory"
	// +optional
	Limits *ResourceValues `json:"limits,omitempty"`
}
