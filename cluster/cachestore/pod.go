package cachestore

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cachedPod is what the leader's cache holds of a pod: its metadata as
// cachedMeta, a cachedPodStatus, and what Kerf reads of its spec. Of the
// spec it keeps:
//   - the node, and the service account (the stream's check of an
//     agent's pod);
//   - the containers' and init containers' names, resources, resize and
//     restart policies;
//   - the ephemeral containers' names and the pod-level resources;
//   - the priority class, and an affinity that names other namespaces
//     (quotaScope: a ResourceQuota's scopes read them).
//
// A corev1.Pod's struct and its Containers' are large, and the
// apiserver's defaulting fills pointers and strings in both that nothing
// in Kerf reads. A cachedPod holds much less heap than a decoded pod
// stripped of what Kerf never reads
// (TestCachedPodsHoldLessThanStrippedPods). The sizes are in
// docs/leader.md, "Reading from the cache: what each cut saved";
// docs/performance.md, "Where the leader's memory goes", has the whole.
//
// Readers never see it. Every read of the cache copies the object it
// returns: controller-runtime's cache reader calls DeepCopyObject. That
// returns the *corev1.Pod the reader asked for, holding what was kept, so
// the cache and the manager's client read pods as before. What sees the
// cachedPod itself:
//   - the cache's index functions, through metav1.Object;
//   - the informer's event handlers (PodStatus);
//   - the lookups of the leader's hot paths (Cache.Lookup and Stored).
//
// A read with client.UnsafeDisableDeepCopy gets a view where the cache
// can read its informer's own objects, and a copy elsewhere
// (Cache.storesViews). The view (View) is a *corev1.Pod sharing what the
// cachedPod holds, only to be read.
//
// The one write made from a read pod is the in-place resize. The
// apiserver's resize subresource keeps everything of the stored pod but
// the containers' resources and resize policies. So a pod read from the
// cache resizes as a whole one would
// (TestTheCacheHoldsPodsWithoutWhatKerfNeverReads, in cluster/).
type cachedPod struct {
	cachedMeta

	nodeName, serviceAccountName string
	containers, initContainers   []cachedContainer
	ephemeralContainers          []string
	resources                    *corev1.ResourceRequirements
	// overhead is the RuntimeClass's overhead admission set, which the
	// gates count in what a pod asks of its node and its quota.
	overhead corev1.ResourceList
	scope    quotaScope
	status   cachedPodStatus
}

// cachedContainer is what a cachedPod keeps of a container.
type cachedContainer struct {
	name          string
	resources     corev1.ResourceRequirements
	resizePolicy  []corev1.ContainerResizePolicy
	restartPolicy *corev1.ContainerRestartPolicy
}

var _ client.Object = (*cachedPod)(nil)

// newCachedPod keeps of p what a cachedPod holds. It shares p's metadata,
// status and resource lists (interned by internPod before): p is not used
// after.
func newCachedPod(p *corev1.Pod) *cachedPod {
	c := &cachedPod{
		cachedMeta: keepMeta(&p.ObjectMeta), nodeName: p.Spec.NodeName, serviceAccountName: p.Spec.ServiceAccountName,
		containers: keepContainers(p.Spec.Containers), initContainers: keepContainers(p.Spec.InitContainers),
		resources: p.Spec.Resources, overhead: p.Spec.Overhead, scope: keepQuotaScope(&p.Spec), status: keepStatus(&p.Status),
	}
	if n := len(p.Spec.EphemeralContainers); n > 0 {
		c.ephemeralContainers = make([]string, n)
		for i := range p.Spec.EphemeralContainers {
			c.ephemeralContainers[i] = p.Spec.EphemeralContainers[i].Name
		}
	}
	return c
}

func keepContainers(cs []corev1.Container) []cachedContainer {
	if cs == nil {
		return nil
	}
	out := make([]cachedContainer, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = cachedContainer{name: internString(c.Name), resources: c.Resources, resizePolicy: c.ResizePolicy, restartPolicy: c.RestartPolicy}
	}
	return out
}

// Pod returns a new corev1.Pod holding what c keeps, its own to change:
// nothing is shared with c.
func (c *cachedPod) Pod() *corev1.Pod {
	p := &corev1.Pod{TypeMeta: podKind.typeMeta, Spec: corev1.PodSpec{NodeName: c.nodeName, ServiceAccountName: c.serviceAccountName,
		Containers: inflateContainers(c.containers), InitContainers: inflateContainers(c.initContainers), Resources: c.resources.DeepCopy(),
		Overhead: c.overhead.DeepCopy()}}
	c.scope.into(&p.Spec, false)
	c.copyInto(&p.ObjectMeta)
	status := c.status.view()
	status.DeepCopyInto(&p.Status)
	if c.ephemeralContainers != nil {
		p.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(c.ephemeralContainers))
		for i, name := range c.ephemeralContainers {
			p.Spec.EphemeralContainers[i].Name = name
		}
	}
	return p
}

func inflateContainers(cs []cachedContainer) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = corev1.Container{Name: c.name, ResizePolicy: append([]corev1.ContainerResizePolicy(nil), c.resizePolicy...)}
		c.resources.DeepCopyInto(&out[i].Resources)
		if c.restartPolicy != nil {
			rp := *c.restartPolicy
			out[i].RestartPolicy = &rp
		}
	}
	return out
}

// GetObjectKind implements runtime.Object: a Pod's.
func (c *cachedPod) GetObjectKind() schema.ObjectKind { return podKind }

// DeepCopyObject implements runtime.Object: the *corev1.Pod that c keeps
// (Pod), the type every reader of the cache asks for.
func (c *cachedPod) DeepCopyObject() runtime.Object { return c.Pod() }

// View implements viewer: a *corev1.Pod holding what c keeps and sharing
// it, for a read that only reads (client.UnsafeDisableDeepCopy). It
// shares the metadata's maps and slices, the status and the containers'
// resources. It costs the Pod's and its containers' structs rather than
// Pod's deep copy.
func (c *cachedPod) View() runtime.Object {
	p := &corev1.Pod{}
	c.ViewInto(p)
	return p
}

// ViewInto implements viewer: View written into dst, a
// *corev1.Pod (a list's item), whose struct is not allocated anew.
func (c *cachedPod) ViewInto(dst runtime.Object) bool {
	p, ok := dst.(*corev1.Pod)
	if !ok {
		return false
	}
	*p = corev1.Pod{TypeMeta: podKind.typeMeta, ObjectMeta: c.view(), Status: c.status.view(), Spec: corev1.PodSpec{NodeName: c.nodeName,
		ServiceAccountName: c.serviceAccountName, Containers: viewContainers(c.containers), InitContainers: viewContainers(c.initContainers),
		Resources: c.resources, Overhead: c.overhead}}
	c.scope.into(&p.Spec, true)
	if c.ephemeralContainers != nil {
		p.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(c.ephemeralContainers))
		for i, name := range c.ephemeralContainers {
			p.Spec.EphemeralContainers[i].Name = name
		}
	}
	return true
}

// viewContainers is inflateContainers sharing the containers' resources,
// resize and restart policies.
func viewContainers(cs []cachedContainer) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = corev1.Container{Name: c.name, Resources: c.resources, ResizePolicy: c.resizePolicy, RestartPolicy: c.restartPolicy}
	}
	return out
}

// PodStatus returns the status of a pod an informer delivered. Of a
// cachedPod, in the leader's cache, it is a view, only to be read. Of a
// *corev1.Pod, from a cache without Transform, it is the pod's. ok is
// false for any other object.
func PodStatus(o any) (corev1.PodStatus, bool) {
	switch p := o.(type) {
	case *cachedPod:
		return p.status.view(), true
	case *corev1.Pod:
		return p.Status, true
	}
	return corev1.PodStatus{}, false
}

// PodView returns a pod an informer delivered as a *corev1.Pod. Of a
// cachedPod it is a view, only to be read; of a *corev1.Pod, the pod. ok
// is false for any other object.
func PodView(o any) (*corev1.Pod, bool) {
	switch p := o.(type) {
	case *cachedPod:
		return p.View().(*corev1.Pod), true
	case *corev1.Pod:
		return p, true
	}
	return nil, false
}

// PodNodeName returns the node a pod an informer delivered (a cachedPod
// or a *corev1.Pod) is bound to. ok is false for any other object.
func PodNodeName(o any) (string, bool) {
	switch p := o.(type) {
	case *cachedPod:
		return p.nodeName, true
	case *corev1.Pod:
		return p.Spec.NodeName, true
	}
	return "", false
}
