package cachestore

// The package's test helpers: its control plane, and the workloads and
// pods its tests cache.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-cachestore-test-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

// deployment is a one-replica Deployment whose one container app asks
// for cpu and mem (requests equal to limits), as the leader's tests make
// it.
func deployment(ns, name string, cpu, mem string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:dev",
					Resources: corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()}}}},
			},
		},
	}
}

// runningPod creates the Deployment's current ReplicaSet and one Running
// pod of it on node-1, as the controller-manager, the scheduler and a
// kubelet would (none runs in these tests), and returns the pod as the
// apiserver stored it.
func runningPod(t *testing.T, c client.Client, dep *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": dep.Name, "pod-template-hash": "h1"}
	tmpl := *dep.Spec.Template.DeepCopy()
	tmpl.Labels = labels
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	require.NoError(t, c.Create(ctx, rs))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1-x", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = "node-1"
	require.NoError(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Resources: pod.Spec.Containers[0].Resources.DeepCopy(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	require.NoError(t, c.Status().Update(ctx, pod))
	return pod
}
