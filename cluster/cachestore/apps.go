package cachestore

import (
	"crypto/sha256"
	"encoding/hex"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/workload"
)

// cachedReplicaSet and cachedDeployment are what the leader's cache holds
// of a ReplicaSet and of a Deployment, as cachedPod is of a pod. The
// decoded structs hold a whole pod template inline. The cache strips it
// to a digest and, of a Deployment, to what Kerf reads (stripTemplate).
// docs/leader.md, "Reading from the cache: what each cut saved", has the
// sizes.
//
// Every read copies them into the *appsv1.ReplicaSet or
// *appsv1.Deployment the reader asked for (DeepCopyObject), with the
// template as stripTemplate leaves it. A read with
// client.UnsafeDisableDeepCopy gets a view sharing what they hold (View,
// as cachedPod's).
//
// Of a ReplicaSet, Kerf reads its metadata (labels, the revision
// annotation, the controller reference), its selector and its template's
// digest. cluster/workload reads them for the owner chain of a pod and a
// Deployment's current ReplicaSet. Of a Deployment, Kerf reads all of it
// but the parts of its template stripTemplate drops and of its status's
// conditions all but the Progressing one's status and reason
// (keepDeploymentStatus).
type cachedReplicaSet struct {
	cachedMeta

	selector *metav1.LabelSelector
	digest   templateDigest
}

// cachedDeployment is what the leader's cache holds of a Deployment (see
// cachedReplicaSet).
type cachedDeployment struct {
	cachedMeta

	replicas, revisionHistoryLimit, progressDeadlineSeconds *int32
	selector                                                *metav1.LabelSelector
	strategy                                                appsv1.DeploymentStrategy
	minReadySeconds                                         int32
	paused                                                  bool
	template                                                cachedTemplate
	status                                                  appsv1.DeploymentStatus
}

// cachedTemplate is what a cachedDeployment keeps of its pod template:
// what stripTemplate keeps.
type cachedTemplate struct {
	digest                     templateDigest
	containers, initContainers []cachedContainer
	resources                  *corev1.ResourceRequirements
	scope                      quotaScope
}

var (
	_ client.Object = (*cachedReplicaSet)(nil)
	_ client.Object = (*cachedDeployment)(nil)
)

// newCachedReplicaSet keeps of rs what a cachedReplicaSet holds, sharing
// its metadata and selector: rs is not used after.
func newCachedReplicaSet(rs *appsv1.ReplicaSet) *cachedReplicaSet {
	return &cachedReplicaSet{cachedMeta: keepMeta(&rs.ObjectMeta), selector: rs.Spec.Selector,
		digest: workload.TemplateSum(&rs.Spec.Template)}
}

// ReplicaSet returns a new appsv1.ReplicaSet holding what c keeps, its own
// to change.
func (c *cachedReplicaSet) ReplicaSet() *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{TypeMeta: replicaSetKind.typeMeta, Spec: appsv1.ReplicaSetSpec{Selector: c.selector.DeepCopy(),
		Template: digestTemplate(c.digest)}}
	c.copyInto(&rs.ObjectMeta)
	return rs
}

// GetObjectKind implements runtime.Object: a ReplicaSet's.
func (c *cachedReplicaSet) GetObjectKind() schema.ObjectKind { return replicaSetKind }

// DeepCopyObject implements runtime.Object: the *appsv1.ReplicaSet c
// keeps (ReplicaSet).
func (c *cachedReplicaSet) DeepCopyObject() runtime.Object { return c.ReplicaSet() }

// View implements viewer: a *appsv1.ReplicaSet holding what c
// keeps and sharing its metadata and selector, for a read that only
// reads (see cachedPod.View).
func (c *cachedReplicaSet) View() runtime.Object {
	rs := &appsv1.ReplicaSet{}
	c.ViewInto(rs)
	return rs
}

// ViewInto implements viewer: View written into dst, a
// *appsv1.ReplicaSet.
func (c *cachedReplicaSet) ViewInto(dst runtime.Object) bool {
	rs, ok := dst.(*appsv1.ReplicaSet)
	if ok {
		*rs = appsv1.ReplicaSet{TypeMeta: replicaSetKind.typeMeta, ObjectMeta: c.view(),
			Spec: appsv1.ReplicaSetSpec{Selector: c.selector, Template: digestTemplate(c.digest)}}
	}
	return ok
}

// newCachedDeployment keeps of d what a cachedDeployment holds, sharing
// its metadata, spec fields and status: d is not used after.
func newCachedDeployment(d *appsv1.Deployment) *cachedDeployment {
	digest := workload.TemplateSum(&d.Spec.Template)
	spec := &d.Spec.Template.Spec
	internSpec(spec)
	return &cachedDeployment{cachedMeta: keepMeta(&d.ObjectMeta),
		replicas: d.Spec.Replicas, revisionHistoryLimit: d.Spec.RevisionHistoryLimit, progressDeadlineSeconds: d.Spec.ProgressDeadlineSeconds,
		selector: d.Spec.Selector, strategy: d.Spec.Strategy, minReadySeconds: d.Spec.MinReadySeconds, paused: d.Spec.Paused,
		template: cachedTemplate{digest: digest,
			containers: keepContainers(spec.Containers), initContainers: keepContainers(spec.InitContainers), resources: spec.Resources,
			scope: keepQuotaScope(spec)},
		status: keepDeploymentStatus(&d.Status)}
}

// keepDeploymentStatus returns what a cachedDeployment keeps of s,
// sharing it: s is not used after. Of the conditions it keeps the
// Progressing one's type, status and reason, which the RolloutInProgress
// gate reads; their strings are interned. The deployment controller
// writes two conditions on every Deployment (Available, Progressing),
// each with its own message, reason and two times: about 730 bytes of
// heap a Deployment that nothing in Kerf reads
// (TestCachedDeploymentsKeepTheProgressingCondition).
func keepDeploymentStatus(s *appsv1.DeploymentStatus) appsv1.DeploymentStatus {
	kept := *s
	kept.Conditions = nil
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == appsv1.DeploymentProgressing {
			kept.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
				Status: corev1.ConditionStatus(internString(string(c.Status))), Reason: internString(c.Reason)}}
			break
		}
	}
	return kept
}

// Deployment returns a new appsv1.Deployment holding what c keeps, its own
// to change: its template as stripTemplate leaves it.
func (c *cachedDeployment) Deployment() *appsv1.Deployment {
	d := &appsv1.Deployment{TypeMeta: deploymentKind.typeMeta, Spec: appsv1.DeploymentSpec{
		Replicas: copyInt32(c.replicas), RevisionHistoryLimit: copyInt32(c.revisionHistoryLimit),
		ProgressDeadlineSeconds: copyInt32(c.progressDeadlineSeconds), Selector: c.selector.DeepCopy(),
		MinReadySeconds: c.minReadySeconds, Paused: c.paused, Template: digestTemplate(c.template.digest),
	}}
	c.copyInto(&d.ObjectMeta)
	c.strategy.DeepCopyInto(&d.Spec.Strategy)
	c.status.DeepCopyInto(&d.Status)
	d.Spec.Template.Spec.Containers = inflateContainers(c.template.containers)
	d.Spec.Template.Spec.InitContainers = inflateContainers(c.template.initContainers)
	d.Spec.Template.Spec.Resources = c.template.resources.DeepCopy()
	c.template.scope.into(&d.Spec.Template.Spec, false)
	return d
}

// GetObjectKind implements runtime.Object: a Deployment's.
func (c *cachedDeployment) GetObjectKind() schema.ObjectKind { return deploymentKind }

// DeepCopyObject implements runtime.Object: the *appsv1.Deployment c
// keeps (Deployment).
func (c *cachedDeployment) DeepCopyObject() runtime.Object { return c.Deployment() }

// View implements viewer: a *appsv1.Deployment holding what c
// keeps and sharing it, for a read that only reads (see cachedPod.View).
func (c *cachedDeployment) View() runtime.Object {
	d := &appsv1.Deployment{}
	c.ViewInto(d)
	return d
}

// ViewInto implements viewer: View written into dst, a
// *appsv1.Deployment.
func (c *cachedDeployment) ViewInto(dst runtime.Object) bool {
	d, ok := dst.(*appsv1.Deployment)
	if !ok {
		return false
	}
	*d = appsv1.Deployment{TypeMeta: deploymentKind.typeMeta, ObjectMeta: c.view(), Status: c.status, Spec: appsv1.DeploymentSpec{
		Replicas: c.replicas, RevisionHistoryLimit: c.revisionHistoryLimit, ProgressDeadlineSeconds: c.progressDeadlineSeconds,
		Selector: c.selector, Strategy: c.strategy, MinReadySeconds: c.minReadySeconds, Paused: c.paused,
		Template: digestTemplate(c.template.digest),
	}}
	d.Spec.Template.Spec.Containers = viewContainers(c.template.containers)
	d.Spec.Template.Spec.InitContainers = viewContainers(c.template.initContainers)
	d.Spec.Template.Spec.Resources = c.template.resources
	c.template.scope.into(&d.Spec.Template.Spec, true)
	return true
}

// templateDigest is a template's digest as its bytes
// (workload.TemplateSum), inline in the cached object. Its hex string was
// a 64-byte allocation of its own, about 4 MB at 25,000 Deployments and
// their ReplicaSets.
type templateDigest = [sha256.Size]byte

// digestTemplate is a stripped template holding only its digest, as
// workload.TemplateDigest gives it.
func digestTemplate(digest templateDigest) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		workload.TemplateDigestAnnotation: hex.EncodeToString(digest[:])}}}
}

func copyInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
