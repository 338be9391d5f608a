package rightsizing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// podLevelWeb creates the Deployment web whose pods set pod-level
// resources (requests 500m and 256Mi, limits 1 cpu and 512Mi) beside their
// container's 500m and 256Mi, and a policy that watches for an hour.
func podLevelWeb(t *testing.T, c client.Client, ns string) *appsv1.Deployment {
	t.Helper()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	require.NoError(t, c.Create(context.Background(), dep))
	require.NoError(t, c.Create(context.Background(), kubetest.PolicyWith(ns, time.Hour, nil)))
	return dep
}

// podLevelRecommendation asks for a pod-level memory limit of mem and
// nothing of the containers.
func podLevelRecommendation(ns string, strategy v1alpha1.Strategy, mem string) *v1alpha1.RightsizingRecommendation {
	rsr := kubetest.Recommendation(ns, "web", "web", strategy, "500m", "256Mi")
	rsr.Spec.Containers = []v1alpha1.ContainerResources{{Name: v1alpha1.PodLevel, Limits: &v1alpha1.ResourceValues{Memory: kubetest.Q(mem)}}}
	return rsr
}

// TestPodLevelLimitResizedInPlaceAndBackOnOOMKill: a recommendation's (pod)
// entry lowers the pods' pod-level memory limit. The leader resizes
// spec.resources in place, watches the pod once the kubelet reports the
// values in status.resources, and on an OOM kill of the container resizes
// the pod-level limit back. The containers' values and the template are
// never written. Without pod-level support Plan finds no container (pod)
// and nothing is applied.
func TestPodLevelLimitResizedInPlaceAndBackOnOOMKill(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := podLevelWeb(t, c, ns)
	pod := kubetest.RunningPod(t, c, dep)
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, podLevelRecommendation(ns, v1alpha1.StrategyInPlace, "384Mi")))

	kubetest.KubeletReports(t, c, pod, "")
	assert.Equal(t, "384Mi", pod.Spec.Resources.Limits.Memory().String(), "the pod-level limit was resized")
	assert.Equal(t, "256Mi", pod.Spec.Containers[0].Resources.Limits.Memory().String(), "the container is left alone")
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	require.Len(t, rsr.Status.Change.Containers, 1)
	cc := rsr.Status.Change.Containers[0]
	assert.Equal(t, v1alpha1.PodLevel, cc.Name)
	assert.Equal(t, "512Mi", cc.Previous.Limits.Memory.String())
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, rsr.Status.Change.Resources)

	// Any container of the pod is under the pod's limit: its OOM kill is
	// the change's.
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Spec.Resources.Limits.Memory().String() == "512Mi"
	}, 20*time.Second, 50*time.Millisecond, "the pod-level limit was never resized back")

	// Restored once the kubelet runs the pod-level values again.
	pod.Status.ObservedGeneration = pod.Generation
	pod.Status.Resources = pod.Spec.Resources.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, pod))
	kubetest.WaitRestored(t, c, ns, "web")
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, "512Mi", got.Spec.Template.Spec.Resources.Limits.Memory().String(), "the template was never changed")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "OOMKills", "memory"), 1)
}

// TestPodLevelLimitRolledOutAndRestoredInTheTemplate: with Rollout the
// (pod) entry patches spec.template.spec.resources, a pod of the new
// template is adopted, and its OOM kill patches the pod-level limit back.
func TestPodLevelLimitRolledOutAndRestoredInTheTemplate(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := podLevelWeb(t, c, ns)
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, podLevelRecommendation(ns, v1alpha1.StrategyRollout, "384Mi")))

	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, "384Mi", got.Spec.Template.Spec.Resources.Limits.Memory().String())
	assert.Equal(t, "1", got.Spec.Template.Spec.Resources.Limits.Cpu().String(), "the other pod-level values are kept")
	assert.Equal(t, "256Mi", got.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(), "the container is left alone")

	pod := kubetest.AdoptedPod(t, c, &got, "web-new-1")
	require.NotNil(t, pod.Spec.Resources)
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	kubetest.WaitRestored(t, c, ns, "web")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, "512Mi", got.Spec.Template.Spec.Resources.Limits.Memory().String(), "the pod-level limit is back")
}

// TestPodLevelEntryRefusedWhereThePodsSetNone: Kerf changes pod-level
// values only where the pods set them; a (pod) entry for pods without
// spec.resources is blocked with a reason that says so. Before, Plan's
// error was only logged and retried.
func TestPodLevelEntryRefusedWhereThePodsSetNone(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(context.Background(), podLevelRecommendation(ns, v1alpha1.StrategyRollout, "384Mi")))

	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Phase == v1alpha1.PhaseBlocked && rsr.Status.Reason == v1alpha1.ReasonInvalidValues
	}, "the (pod) entry was never refused")
	assert.Contains(t, rsr.Status.Message, "the pods set no pod-level resources (spec.resources) to change")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Limits.Memory().String(), "the template keeps its values")
}
