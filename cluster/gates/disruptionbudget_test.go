package gates_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// pdb creates PodDisruptionBudget ns/name selecting app=app (every pod
// of ns for "*"), with the status the disruption controller would write
// (none runs in these tests).
func pdb(t *testing.T, c client.Client, ns, name, app string, healthy, desired, allowed int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	ctx := context.Background()
	p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(desired)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if app == "*" {
		p.Spec.Selector = &metav1.LabelSelector{}
	}
	require.NoError(t, c.Create(ctx, p))
	p.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: healthy, DesiredHealthy: desired, DisruptionsAllowed: allowed,
		ExpectedPods: healthy, ObservedGeneration: p.Generation}
	require.NoError(t, c.Status().Update(ctx, p))
	return p
}

// TestDisruptionBudgetBlocksAChangeThatRestartsPods: a Rollout, or an
// in-place resize of a resource whose resizePolicy restarts the
// container, is blocked while a budget selecting the pods allows no
// disruption; the block names the budget and its figures.
func TestDisruptionBudgetBlocksAChangeThatRestartsPods(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	restartMemory := func(p *corev1.Pod) {
		p.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{
			{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
			{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	}
	for _, tc := range []struct {
		name     string
		strategy v1alpha1.Strategy
		newMem   string
		pod      func(*corev1.Pod)
		app      string
		allowed  int32
		want     string
	}{
		{name: "a Rollout", strategy: v1alpha1.StrategyRollout, newMem: "256Mi", app: "web",
			want: "PodDisruptionBudget %s/web allows no disruption (currentHealthy 2, desiredHealthy 2, disruptionsAllowed 0) and the Rollout replaces the workload's pods"},
		{name: "an in-place resize that restarts", strategy: v1alpha1.StrategyInPlace, newMem: "512Mi", pod: restartMemory, app: "web",
			want: "PodDisruptionBudget %s/web allows no disruption (currentHealthy 2, desiredHealthy 2, disruptionsAllowed 0) and the in-place resize restarts container app (its memory resizePolicy is RestartContainer)"},
		{name: "an in-place resize of a resource that does not restart", strategy: v1alpha1.StrategyInPlace, newMem: "256Mi", pod: restartMemory, app: "web"},
		{name: "an in-place resize without a resize policy", strategy: v1alpha1.StrategyInPlace, newMem: "512Mi", app: "web"},
		{name: "Deferred", strategy: v1alpha1.StrategyDeferred, newMem: "512Mi", app: "web"},
		{name: "a budget of other pods", strategy: v1alpha1.StrategyRollout, newMem: "256Mi", app: "other"},
		{name: "a budget with room", strategy: v1alpha1.StrategyRollout, newMem: "256Mi", app: "web", allowed: 1},
		{name: "a budget of every pod", strategy: v1alpha1.StrategyRollout, newMem: "256Mi", app: "*",
			want: "PodDisruptionBudget %s/web allows no disruption (currentHealthy 2, desiredHealthy 2, disruptionsAllowed 0) and the Rollout replaces the workload's pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			pdb(t, c, ns, "web", tc.app, 2, 2, tc.allowed)
			pods := webPods(ns, "node-1", 2, "500m", "256Mi")
			for i := range pods {
				if tc.pod != nil {
					tc.pod(&pods[i])
				}
			}
			b, err := gates.DisruptionBudget{Reader: c}.Check(ctx, webChange(t, ns, 2, tc.strategy, "500m", "256Mi", "1", tc.newMem, pods...))
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonDisruptionBudget, b.Reason)
			assert.Equal(t, sprintf(tc.want, ns), b.Message)
		})
	}
}
