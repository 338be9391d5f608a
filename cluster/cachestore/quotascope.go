package cachestore

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kerf-dev/kerf/cluster/workload"
)

// quotaScope is what a cached pod or template keeps for a quota's
// PriorityClass and CrossNamespacePodAffinity scopes. That is the
// priority class name, and the affinity only where it names other
// namespaces (most pods have none that does, and the rest of an affinity
// is not read).
type quotaScope struct {
	priorityClassName string
	affinity          *corev1.Affinity
}

// keepQuotaScope keeps of spec what a quotaScope holds, sharing it.
func keepQuotaScope(spec *corev1.PodSpec) quotaScope {
	q := quotaScope{priorityClassName: internString(spec.PriorityClassName)}
	if workload.UsesCrossNamespacePodAffinity(spec) {
		q.affinity = spec.Affinity
	}
	return q
}

// into sets spec's priority class and affinity from q: a copy of the
// affinity, or q's own when share (a view).
func (q quotaScope) into(spec *corev1.PodSpec, share bool) {
	spec.PriorityClassName = q.priorityClassName
	if share {
		spec.Affinity = q.affinity
	} else {
		spec.Affinity = q.affinity.DeepCopy()
	}
}
