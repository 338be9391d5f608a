package gates_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestQoSClassKeepsThePodsClassUnlessThePolicyAllows: a change that moves
// the pods to another QoS class is blocked naming both classes. A Rollout
// may with allowQoSChange; an InPlace one never, as the apiserver refuses
// it. Pod-level resources are not judged.
func TestQoSClassKeepsThePodsClassUnlessThePolicyAllows(t *testing.T) {
	cases := []struct {
		name     string
		strategy v1alpha1.Strategy
		applied  values
		allow    bool
		podLevel bool
		want     []string // nil passes
	}{
		{"same class", v1alpha1.StrategyRollout, values{"250m", "128Mi", "250m", "128Mi"}, false, false, nil},
		{"Guaranteed to Burstable", v1alpha1.StrategyRollout, values{reqCPU: "250m"}, false, false,
			[]string{"from QoS class Guaranteed to Burstable", "the policy does not allow it (spec.guardrails.allowQoSChange)"}},
		{"Guaranteed to Burstable, allowed", v1alpha1.StrategyRollout, values{reqCPU: "250m"}, true, false, nil},
		{"Deferred like Rollout", v1alpha1.StrategyDeferred, values{reqMem: "128Mi"}, false, false, []string{"Guaranteed to Burstable"}},
		{"InPlace, even allowed", v1alpha1.StrategyInPlace, values{reqCPU: "250m"}, true, false,
			[]string{"Guaranteed to Burstable", "the apiserver refuses an in-place resize that changes the QoS class"}},
		{"pod-level resources", v1alpha1.StrategyRollout, values{reqCPU: "250m"}, false, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dep := kubetest.Deployment("shop", "web", "500m", "256Mi") // Guaranteed
			if tc.podLevel {
				dep.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			}
			ch := changeOf(t, dep, tc.strategy, tc.applied)
			ch.Guardrails.AllowQoSChange = tc.allow
			b, err := gates.QoSClass{}.Check(context.Background(), ch)
			require.NoError(t, err)
			if tc.want == nil {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonQoSClass, b.Reason)
			for _, w := range tc.want {
				assert.Contains(t, b.Message, w)
			}
		})
	}
}

// TestQoSClassOfAnInPlaceChangeIsTheRunningPods: an InPlace change is
// judged from a running pod's spec, which may differ from the template.
func TestQoSClassOfAnInPlaceChangeIsTheRunningPods(t *testing.T) {
	dep := kubetest.Deployment("shop", "web", "500m", "256Mi") // the template: Guaranteed
	pod := corev1.Pod{Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m") // the pod: Burstable
	ch := changeOf(t, dep, v1alpha1.StrategyInPlace, values{reqCPU: "300m"})
	ch.Pods = []corev1.Pod{pod}
	b, err := gates.QoSClass{}.Check(context.Background(), ch)
	require.NoError(t, err)
	assert.Nil(t, b, "Burstable stays Burstable")
	ch.Containers[0].Applied = resourcesOf(values{reqCPU: "500m"})
	b, err = gates.QoSClass{}.Check(context.Background(), ch)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Contains(t, b.Message, "from QoS class Burstable to Guaranteed")
}
