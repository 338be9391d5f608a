package cluster

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cacheTransform is what the leader's cache keeps of every object it
// watches (docs/performance.md, "Where the leader's memory goes"): all of
// it but the managed fields, which nothing in Kerf reads (its writes are
// patches and a resize; none is a server-side apply, and an update without
// managed fields keeps the stored ones), and of a Pod also none of the
// fields stripPod lists. It runs on each object before the informer stores
// it, so every reader of the manager's cache and client sees the stripped
// object; reads through the API reader are whole.
func cacheTransform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if p, ok := obj.(*corev1.Pod); ok {
		stripPod(p)
	}
	return obj, nil
}

// stripPod drops the fields of a pod that no reader of the leader's cache
// uses. Kerf reads a cached pod's metadata (labels, annotations, owner
// references, UID, deletion), its containers' and init containers' names,
// resources and resize policies (QoS class, the in-place resize, the
// running values), its node and its status (phase, conditions, container
// statuses and resources, the resize conditions); it never reads volumes,
// the containers' environment, mounts, command, probes, lifecycle or
// ports, nor the scheduling constraints. The one write made from a cached
// pod is the resize (cluster/apply inplace.go), and the apiserver's resize
// subresource keeps everything of the stored pod but the containers'
// resources and resize policies, so a stripped pod resizes as a whole one
// would (TestTheCacheHoldsPodsWithoutWhatKerfNeverReads checks it).
func stripPod(p *corev1.Pod) {
	strip := func(cs []corev1.Container) {
		for i := range cs {
			c := &cs[i]
			c.Env, c.EnvFrom, c.VolumeMounts, c.VolumeDevices = nil, nil, nil, nil
			c.Command, c.Args, c.WorkingDir, c.Ports = nil, nil, "", nil
			c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
		}
	}
	strip(p.Spec.Containers)
	strip(p.Spec.InitContainers)
	p.Spec.Volumes = nil
	p.Spec.Affinity, p.Spec.Tolerations, p.Spec.TopologySpreadConstraints = nil, nil, nil
	p.Spec.HostAliases = nil
}
