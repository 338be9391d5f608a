package cachestore

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cachedPodStatus is what a cachedPod keeps of its pod's status: what Kerf
// reads and what describes the pod's state. Keeping less puts a cachedPod
// in a smaller size class of Go's allocator (docs/leader.md, "Reading
// from the cache: what each cut saved", has the sizes).
//   - Of the conditions it keeps those Kerf reads (keptPodConditions).
//   - Of each container's status it keeps all but the image, the
//     container's ID, the user, the volume mounts and the device health,
//     which nothing in Kerf reads. (A termination's container ID, which
//     tells one run's from the next, is kept.)
//   - The kept conditions' types, statuses and reasons are interned: every
//     pod has a PodScheduled condition, its strings decoded on their own.
//   - The pod's and node's IPs, the nominated node, the resource claims,
//     the volume health and the resize status are not kept. A kubelet
//     writes them on every pod, and nothing in the leader reads them from
//     its cache. The resize status is deprecated for the resize
//     conditions.
//
// TestEveryPodStatusFieldIsKeptOrDropped lists the fields, so a field a
// new Kubernetes adds is kept or dropped by a choice.
type cachedPodStatus struct {
	phase                                           corev1.PodPhase
	qosClass                                        corev1.PodQOSClass
	reason, message                                 string
	observedGeneration                              int64
	startTime                                       *metav1.Time
	conditions                                      []corev1.PodCondition
	containers, initContainers, ephemeralContainers []corev1.ContainerStatus
	allocatedResources                              corev1.ResourceList
	resources                                       *corev1.ResourceRequirements
}

// keptPodConditions are the pod conditions Kerf reads: an unschedulable
// pod (PodScheduled) and a resize pending or in progress
// (cluster/healthwatch, cluster/apply). A kubelet writes four more on
// every pod, which are not kept: Ready, ContainersReady, Initialized and
// PodReadyToStartContainers.
var keptPodConditions = []corev1.PodConditionType{corev1.PodScheduled, corev1.PodResizePending, corev1.PodResizeInProgress}

// keepStatus returns what a cachedPodStatus keeps of s, sharing it: s is
// not used after. The container statuses are stripped in place.
func keepStatus(s *corev1.PodStatus) cachedPodStatus {
	for _, ss := range [][]corev1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range ss {
			cs := &ss[i]
			cs.Name = internString(cs.Name)
			cs.Image, cs.ImageID, cs.ContainerID, cs.User, cs.VolumeMounts, cs.AllocatedResourcesStatus = "", "", "", nil, nil, nil
		}
	}
	return cachedPodStatus{phase: s.Phase, qosClass: s.QOSClass, reason: s.Reason, message: s.Message,
		observedGeneration: s.ObservedGeneration, startTime: s.StartTime, conditions: keepConditions(s.Conditions),
		containers: s.ContainerStatuses, initContainers: s.InitContainerStatuses, ephemeralContainers: s.EphemeralContainerStatuses,
		allocatedResources: s.AllocatedResources, resources: s.Resources}
}

// keepConditions returns the conditions of cs that Kerf reads, in a slice
// of their own, leaving the decoded one to the GC. When cs holds no
// other, it returns cs itself.
func keepConditions(cs []corev1.PodCondition) []corev1.PodCondition {
	n := 0
	for i := range cs {
		if slices.Contains(keptPodConditions, cs[i].Type) {
			n++
		}
	}
	switch n {
	case len(cs):
		internConditions(cs)
		return cs
	case 0:
		return nil
	}
	out := make([]corev1.PodCondition, 0, n)
	for i := range cs {
		if slices.Contains(keptPodConditions, cs[i].Type) {
			out = append(out, cs[i])
		}
	}
	internConditions(out)
	return out
}

// internConditions interns the types, statuses and reasons of cs, a
// decoded pod's: nothing else holds it yet.
func internConditions(cs []corev1.PodCondition) {
	for i := range cs {
		c := &cs[i]
		c.Type = corev1.PodConditionType(internString(string(c.Type)))
		c.Status = corev1.ConditionStatus(internString(string(c.Status)))
		c.Reason = internString(c.Reason)
	}
}

// view returns the corev1.PodStatus s keeps, sharing it.
func (s *cachedPodStatus) view() corev1.PodStatus {
	return corev1.PodStatus{Phase: s.phase, QOSClass: s.qosClass, Reason: s.reason, Message: s.message,
		ObservedGeneration: s.observedGeneration, StartTime: s.startTime, Conditions: s.conditions,
		ContainerStatuses: s.containers, InitContainerStatuses: s.initContainers, EphemeralContainerStatuses: s.ephemeralContainers,
		AllocatedResources: s.allocatedResources, Resources: s.resources}
}
