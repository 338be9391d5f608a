package workload

import corev1 "k8s.io/api/core/v1"

// UsesCrossNamespacePodAffinity reports whether a pod spec has a pod
// (anti-)affinity term that names other namespaces. A ResourceQuota's
// CrossNamespacePodAffinity scope matches such a pod: a term, required or
// preferred, with namespaces or a namespaceSelector.
func UsesCrossNamespacePodAffinity(spec *corev1.PodSpec) bool {
	a := spec.Affinity
	if a == nil {
		return false
	}
	cross := func(t *corev1.PodAffinityTerm) bool { return len(t.Namespaces) > 0 || t.NamespaceSelector != nil }
	var required []corev1.PodAffinityTerm
	var preferred []corev1.WeightedPodAffinityTerm
	if a.PodAffinity != nil {
		required = append(required, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		preferred = append(preferred, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	if a.PodAntiAffinity != nil {
		required = append(required, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		preferred = append(preferred, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	for i := range required {
		if cross(&required[i]) {
			return true
		}
	}
	for i := range preferred {
		if cross(&preferred[i].PodAffinityTerm) {
			return true
		}
	}
	return false
}
