package rightsizing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// runningPodOn is kubetest.RunningPod on node.
func runningPodOn(t *testing.T, c client.Client, dep *appsv1.Deployment, node string) *corev1.Pod {
	t.Helper()
	return kubetest.RunningPodsOn(t, c, dep, node, "x")[0]
}

// TestResourceQuotaBlocksUntilTheQuotaHasRoom: an in-place memory increase
// a ResourceQuota has no room for is blocked, naming the quota and its
// figures, and applied once the quota is raised. It fails without the
// gate (applied at once) and without the quotas' watch (blocked for ever).
func TestResourceQuotaBlocksUntilTheQuotaHasRoom(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.RunningPod(t, c, dep)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("512Mi")}}}
	require.NoError(t, c.Create(ctx, q))
	// What the quota controller would count (none runs here): the pod's
	// 256Mi and 128Mi of others.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("384Mi")}}
	require.NoError(t, c.Status().Update(ctx, q))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "512Mi")))

	waitGated(t, c, ns, v1alpha1.ReasonResourceQuota, fmt.Sprintf(
		"ResourceQuota %s/compute: requests.memory has 128Mi free (hard 512Mi, used 384Mi), the change needs 256Mi more (in-place resize of 1 pod)", ns))

	kubetest.Update(t, c, q, func() { q.Spec.Hard[corev1.ResourceRequestsMemory] = resource.MustParse("1Gi") })
	q.Status.Hard = q.Spec.Hard
	require.NoError(t, c.Status().Update(ctx, q))
	kubetest.KubeletReports(t, c, pod, "")
	rsr := kubetest.WaitApplied(t, c, ns, "web")
	assert.Equal(t, "512Mi", rsr.Status.Change.Containers[0].Applied.Requests.Memory.String())
}

// TestNodeHeadroomBlocksUntilTheNodeHasRoom: an in-place CPU increase the
// pod's node cannot hold is blocked, naming the node and its figures, and
// applied once the node has room: its allocatable grows, or another pod
// on it ends or is deleted. It fails without the gate (applied at once)
// and without the Nodes' and pods' watches (blocked for ever).
func TestNodeHeadroomBlocksUntilTheNodeHasRoom(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		room func(t *testing.T, node *corev1.Node, other *corev1.Pod)
	}{
		{name: "the allocatable grows", room: func(t *testing.T, node *corev1.Node, _ *corev1.Pod) {
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(node), node))
			node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("4")
			require.NoError(t, c.Status().Update(ctx, node))
		}},
		{name: "a pod on the node ends", room: func(t *testing.T, _ *corev1.Node, other *corev1.Pod) {
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(other), other))
			other.Status.Phase = corev1.PodSucceeded
			require.NoError(t, c.Status().Update(ctx, other))
		}},
		{name: "a pod on the node is deleted", room: func(t *testing.T, _ *corev1.Node, other *corev1.Pod) {
			require.NoError(t, c.Delete(ctx, other, client.GracePeriodSeconds(0)))
		}},
		{name: "a pod on the node is resized down", room: func(t *testing.T, _ *corev1.Node, other *corev1.Pod) {
			// The room is free once both the spec and what the kubelet
			// runs are lower, as the kubelet's admission counts it.
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(other), other))
			lower := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
			other.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: lower, Limits: lower.DeepCopy()}
			other, err := controlplane.Get(t).Clientset.CoreV1().Pods(other.Namespace).UpdateResize(ctx, other.Name, other, metav1.UpdateOptions{})
			require.NoError(t, err)
			other.Status.ObservedGeneration = other.Generation
			other.Status.ContainerStatuses[0].Resources = other.Spec.Containers[0].Resources.DeepCopy()
			require.NoError(t, c.Status().Update(ctx, other))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns}}
			require.NoError(t, c.Create(ctx, node))
			room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourcePods: resource.MustParse("110")}
			node.Status = corev1.NodeStatus{Capacity: room.DeepCopy(), Allocatable: room}
			require.NoError(t, c.Status().Update(ctx, node))
			dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
			pod := runningPodOn(t, c, dep, node.Name)
			other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"},
				Spec: *kubetest.Deployment(ns, "batch", "1250m", "1Gi").Spec.Template.Spec.DeepCopy()}
			other.Spec.NodeName = node.Name
			require.NoError(t, c.Create(ctx, other))
			kubetest.MarkRunning(t, c, other)
			leadertest.StartReplica(t, ns, "a", cluster.Config{})
			require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "1", "256Mi")))

			waitGated(t, c, ns, v1alpha1.ReasonNodeHeadroom, fmt.Sprintf(
				"Node %s: cpu has 250m free (allocatable 2, requested 1750m by 2 pods), the change needs 500m more for pod %s", node.Name, pod.Name))

			tc.room(t, node, other)
			kubetest.KubeletReports(t, c, pod, "")
			rsr := kubetest.WaitApplied(t, c, ns, "web")
			assert.Equal(t, "1", rsr.Status.Change.Containers[0].Applied.Requests.CPU.String())
		})
	}
}

// TestDisruptionBudgetBlocksARolloutUntilTheBudgetAllowsOne: a Rollout of
// a workload whose PodDisruptionBudget allows no disruption is blocked,
// naming the budget and its figures, and applied once the budget allows
// one. It fails without the gate (applied at once) and without the
// budgets' watch (blocked for ever).
func TestDisruptionBudgetBlocksARolloutUntilTheBudgetAllowsOne(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	kubetest.RunningPod(t, c, dep)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	require.NoError(t, c.Create(ctx, pdb))
	// What the disruption controller would write (none runs here).
	pdb.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1, ObservedGeneration: pdb.Generation}
	require.NoError(t, c.Status().Update(ctx, pdb))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))

	waitGated(t, c, ns, v1alpha1.ReasonDisruptionBudget, fmt.Sprintf(
		"PodDisruptionBudget %s/web allows no disruption (currentHealthy 1, desiredHealthy 1, disruptionsAllowed 0) and the Rollout replaces the workload's pods", ns))
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "the template is left as is")

	// A second pod is healthy: the budget allows one disruption.
	pdb.Status.CurrentHealthy, pdb.Status.DisruptionsAllowed = 2, 1
	require.NoError(t, c.Status().Update(ctx, pdb))
	kubetest.WaitApplied(t, c, ns, "web")
	assert.Equal(t, "250m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String())
}

// TestAQuotaNotYetCountedHoldsAnIncreaseUntilItIs: a ResourceQuota whose
// usage the quota controller has not counted cannot be evaluated, so an
// in-place increase fails closed (GateUnavailable); once the usage is
// counted, with room, the change is applied. It fails without the
// quotas' watch trying GateUnavailable blocks again.
func TestAQuotaNotYetCountedHoldsAnIncreaseUntilItIs(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	pod := kubetest.RunningPod(t, c, dep)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("1Gi")}}}
	require.NoError(t, c.Create(ctx, q))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "512Mi")))

	waitGated(t, c, ns, v1alpha1.ReasonGateUnavailable, fmt.Sprintf(
		"the ResourceQuota gate cannot be evaluated and the change raises requests of running pods: ResourceQuota %s/compute has no usage of requests.memory yet (the quota controller has not counted it)", ns))

	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("256Mi")}}
	require.NoError(t, c.Status().Update(ctx, q))
	kubetest.KubeletReports(t, c, pod, "")
	kubetest.WaitApplied(t, c, ns, "web")
}
