package rightsizing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// waitGateBlocked waits until recommendation ns/web is Blocked with
// reason, and checks that the block is recorded everywhere: the message,
// the blocked action, the Applied condition and the Event. Each carries
// want. The Deployment web keeps its values. It returns the
// recommendation as it read it Blocked.
func waitGateBlocked(t *testing.T, c client.Client, ns, reason, want string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, reason)
	assert.Contains(t, rsr.Status.Message, want)
	blocked := kubetest.HistoryOf(rsr, v1alpha1.ActionBlocked)
	require.NotEmpty(t, blocked)
	assert.Equal(t, reason, blocked[len(blocked)-1].Reason)
	assert.Contains(t, blocked[len(blocked)-1].Message, want)
	cond := kubetest.Condition(rsr, v1alpha1.ConditionApplied)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, v1alpha1.AppliedReasonBlocked, cond.Reason)
	assert.Contains(t, cond.Message, reason+": ")
	assert.Contains(t, cond.Message, want)
	events := kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventBlocked, 1)
	assert.Contains(t, events[len(events)-1].Note, reason+": ")
	var dep appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "500m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "the blocked change is not applied")
	return rsr
}

// waitGated is waitGateBlocked for a message known whole: it is the
// status message, the one blocked action's and the condition's, and no
// change was recorded.
func waitGated(t *testing.T, c client.Client, ns, reason, message string) {
	t.Helper()
	rsr := waitGateBlocked(t, c, ns, reason, message)
	assert.Equal(t, message, rsr.Status.Message)
	blocked := kubetest.HistoryOf(rsr, v1alpha1.ActionBlocked)
	require.Len(t, blocked, 1)
	assert.Equal(t, message, blocked[0].Message)
	cond := kubetest.Condition(rsr, v1alpha1.ConditionApplied)
	require.NotNil(t, cond)
	assert.Equal(t, reason+": "+message, cond.Message)
	assert.Empty(t, rsr.Status.Change, "nothing applied")
}

// TestProtectedNamespaceIsNeverChanged: a leader that protects the
// namespace blocks the change naming it; one that does not applies it.
func TestProtectedNamespaceIsNeverChanged(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))
	a := leadertest.StartReplica(t, ns, "a", cluster.Config{Gates: gates.Options{ProtectedNamespaces: []string{"kube-system", ns}}})
	require.NoError(t, c.Create(context.Background(), kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	waitGateBlocked(t, c, ns, v1alpha1.ReasonProtectedNamespace, "namespace "+ns+" is protected")

	// The gating object is the leader's flag: a leader without it.
	a.Stop()
	leadertest.WaitGracefulStop(t, a)
	leadertest.StartReplica(t, ns, "b", cluster.Config{})
	kubetest.WaitApplied(t, c, ns, "web")
}

// TestRolloutInProgressWaitsForTheWorkloadsStatus: a Deployment whose
// rollout is not done blocks the change naming what is not done; its
// status showing the rollout done applies it (the workload watch).
func TestRolloutInProgressWaitsForTheWorkloadsStatus(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))
	// The deployment controller's status mid-rollout (none runs here).
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 0, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, c.Status().Update(ctx, dep))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	waitGateBlocked(t, c, ns, v1alpha1.ReasonRolloutInProgress, "Deployment "+ns+"/web is mid-rollout: 0 of 1 replicas updated; 2 old replicas still running")

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	require.NoError(t, c.Status().Update(ctx, dep))
	kubetest.WaitApplied(t, c, ns, "web")
	assert.Equal(t, "250m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String())
}

// TestQoSClassChangeWaitsForThePolicyToAllowIt: a Rollout that would make
// the Guaranteed pods Burstable is blocked naming both classes; the
// policy allowing it (spec.guardrails.allowQoSChange) applies it.
func TestQoSClassChangeWaitsForThePolicyToAllowIt(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	p := kubetest.NamespacedPolicy(ns, false)
	dep := kubetest.Web(t, c, ns, p) // requests equal to limits: Guaranteed
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")
	rsr.Spec.Containers[0].Limits = nil // requests only: Burstable
	require.NoError(t, c.Create(ctx, rsr))
	waitGateBlocked(t, c, ns, v1alpha1.ReasonQoSClass, "from QoS class Guaranteed to Burstable, and the policy does not allow it (spec.guardrails.allowQoSChange)")

	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.AllowQoSChange = true })
	kubetest.WaitApplied(t, c, ns, "web")
	got := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "250m", got.Requests.Cpu().String())
	assert.Equal(t, "500m", got.Limits.Cpu().String(), "the limit is kept: Burstable")
}

// TestLimitRangeBlocksUntilItAllowsTheValues: values above a LimitRange's
// max are blocked naming the LimitRange, the field and the bound; raising
// the max, or deleting the LimitRange, applies them (the LimitRange
// watch).
func TestLimitRangeBlocksUntilItAllowsTheValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow func(t *testing.T, c client.Client, lr *corev1.LimitRange)
	}{
		{"max raised", func(t *testing.T, c client.Client, lr *corev1.LimitRange) {
			kubetest.Update(t, c, lr, func() { lr.Spec.Limits[0].Max[corev1.ResourceMemory] = resource.MustParse("1Gi") })
		}},
		{"deleted", func(t *testing.T, c client.Client, lr *corev1.LimitRange) {
			require.NoError(t, c.Delete(context.Background(), lr))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := controlplane.Get(t).Client
			ctx := context.Background()
			ns := kubetest.Namespace(t, c)
			dep := kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))
			lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits"},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
					Max: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}}}}
			require.NoError(t, c.Create(ctx, lr))
			leadertest.StartReplica(t, ns, "a", cluster.Config{})
			require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "512Mi")))
			waitGateBlocked(t, c, ns, v1alpha1.ReasonLimitRange, "LimitRange "+ns+"/limits: container app memory limit 512Mi above its Container max 300Mi")

			tc.allow(t, c, lr)
			kubetest.WaitApplied(t, c, ns, "web")
			assert.Equal(t, "512Mi", kubetest.TemplateResources(t, c, dep).Limits.Memory().String())
		})
	}
}

// TestQoSClassChangeInPlaceIsBlockedEvenWhereAllowed: an InPlace change that
// would make the Guaranteed pod Burstable is blocked, saying the apiserver
// refuses such a resize, even where the policy allows a QoS change; the
// pod is not resized.
func TestQoSClassChangeInPlaceIsBlockedEvenWhereAllowed(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	p := kubetest.NamespacedPolicy(ns, false)
	p.Spec.Guardrails.AllowQoSChange = true
	dep := kubetest.Web(t, c, ns, p)
	pod := kubetest.RunningPod(t, c, dep)
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "256Mi")
	rsr.Spec.Containers[0].Limits = nil
	require.NoError(t, c.Create(ctx, rsr))
	waitGateBlocked(t, c, ns, v1alpha1.ReasonQoSClass,
		"from QoS class Guaranteed to Burstable; the apiserver refuses an in-place resize that changes the QoS class")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, "500m", pod.Spec.Containers[0].Resources.Requests.Cpu().String(), "the pod is not resized")
}

// TestPodLevelResourcesBlocksValuesAboveThePods: a Deployment whose pods
// set pod-level resources (512Mi) gets a Rollout of a 600Mi container
// request and limit. It is blocked naming the pod's figure before anything is
// written: without the gate the apiserver refuses the template and the
// apply fails. Values within the pod's are then applied.
func TestPodLevelResourcesBlocksValuesAboveThePods(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	pod := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Requests: pod, Limits: pod.DeepCopy()}
	require.NoError(t, c.Create(ctx, dep))
	require.NoError(t, c.Create(ctx, kubetest.NamespacedPolicy(ns, false)))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "600Mi")
	require.NoError(t, c.Create(ctx, rsr))
	waitGateBlocked(t, c, ns, v1alpha1.ReasonPodLevelResources, "containers request 600Mi memory, above the pod's 512Mi")

	kubetest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.Memory, rsr.Spec.Containers[0].Limits.Memory = kubetest.Q("400Mi"), kubetest.Q("400Mi")
	})
	kubetest.WaitApplied(t, c, ns, "web")
	got := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "400Mi", got.Limits.Memory().String())
}
