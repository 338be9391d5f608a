package gates_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// TestLimitRangeRefusesWhatTheApiserverWould: a change whose values break a
// LimitRange's min, max or maxLimitRequestRatio, for a container or for
// the pod's sums, is blocked naming the LimitRange, the field and its
// bound. Values within every bound pass.
func TestLimitRangeRefusesWhatTheApiserverWould(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	list := func(pairs ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return l
	}
	container := corev1.LimitRangeItem{Type: corev1.LimitTypeContainer,
		Min: list("cpu", "100m", "memory", "64Mi"), Max: list("cpu", "2", "memory", "1Gi"), MaxLimitRequestRatio: list("memory", "2")}
	pod := corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: list("cpu", "1")}
	cases := []struct {
		name     string
		item     corev1.LimitRangeItem
		strategy v1alpha1.Strategy
		applied  values
		want     string // "" passes
	}{
		{"within the bounds", container, v1alpha1.StrategyRollout, values{"200m", "256Mi", "200m", "384Mi"}, ""},
		{"limit above max", container, v1alpha1.StrategyRollout, values{"", "1Gi", "", "2Gi"},
			"container app memory limit 2Gi above its Container max 1Gi"},
		{"limit above max, in place", container, v1alpha1.StrategyInPlace, values{"3", "", "3", ""},
			"container app cpu limit 3 above its Container max 2"},
		{"request below min", container, v1alpha1.StrategyInPlace, values{"50m", "", "", ""},
			"container app cpu request 50m below its Container min 100m"},
		{"limit over request above the ratio", container, v1alpha1.StrategyRollout, values{"", "128Mi", "", "512Mi"},
			"container app memory limit 512Mi / request 128Mi = 4 above its Container maxLimitRequestRatio 2"},
		{"pod sum above max", pod, v1alpha1.StrategyRollout, values{"900m", "", "900m", ""},
			"pod total cpu limit 1100m above its Pod max 1"},
		{"pod sum within max", pod, v1alpha1.StrategyRollout, values{"800m", "", "800m", ""}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := kubetest.Namespace(t, c)
			lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits"},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{tc.item}}}
			require.NoError(t, c.Create(ctx, lr))
			dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
			// A sidecar of 200m, for the pod's sums.
			side := dep.Spec.Template.Spec.Containers[0].DeepCopy()
			side.Name = "sidecar"
			side.Resources.Requests[corev1.ResourceCPU], side.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("200m"), resource.MustParse("200m")
			dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, *side)
			b, err := gates.LimitRange{Reader: c}.Check(ctx, changeOf(t, dep, tc.strategy, tc.applied))
			require.NoError(t, err)
			if tc.want == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonLimitRange, b.Reason)
			assert.Equal(t, "LimitRange "+ns+"/limits: "+tc.want, b.Message)
		})
	}
}

// TestLimitRangeDefaultsAbsentValuesAsANewPodsAre: a container without a
// limit gets the LimitRange's default before the bounds are checked, as
// LimitRanger gives it to a new pod.
func TestLimitRangeDefaultsAbsentValuesAsANewPodsAre(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	require.NoError(t, c.Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ratio"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Default:              corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			MaxLimitRequestRatio: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2")}}}}}))
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	delete(dep.Spec.Template.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory)
	b, err := gates.LimitRange{Reader: c}.Check(ctx, changeOf(t, dep, v1alpha1.StrategyRollout, values{reqMem: "256Mi"}))
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Contains(t, b.Message, "memory limit 1Gi / request 256Mi = 4 above its Container maxLimitRequestRatio 2")
	b, err = gates.LimitRange{Reader: c}.Check(ctx, changeOf(t, dep, v1alpha1.StrategyRollout, values{reqMem: "512Mi"}))
	require.NoError(t, err)
	assert.Nil(t, b)
}

// forbiddenReader fails every list, as a reader without the permission.
type forbiddenReader struct{ client.Reader }

func (forbiddenReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New(`limitranges is forbidden: User "kerf-leader" cannot list resource "limitranges"`)
}

// TestLimitRangeUnreadableFailsClosedForAnInPlaceIncrease: a LimitRange
// gate that cannot read is GateUnavailable for an in-place increase of
// requests, and passes a decrease.
func TestLimitRangeUnreadableFailsClosedForAnInPlaceIncrease(t *testing.T) {
	ctx := context.Background()
	k := &gates.Checker{Gates: []gates.Gate{gates.LimitRange{Reader: forbiddenReader{}}}}
	up := changeOf(t, kubetest.Deployment("shop", "web", "500m", "256Mi"), v1alpha1.StrategyInPlace, values{reqCPU: "1", limCPU: "1"})
	up.Containers[0].Previous = resourcesOf(values{reqCPU: "500m", limCPU: "500m"})
	b, err := k.Check(ctx, up)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonGateUnavailable, b.Reason)
	assert.Contains(t, b.Message, "the LimitRange gate cannot be evaluated")
	assert.Contains(t, b.Message, "cannot list resource \"limitranges\"")

	down := changeOf(t, kubetest.Deployment("shop", "web", "500m", "256Mi"), v1alpha1.StrategyInPlace, values{reqCPU: "250m", limCPU: "250m"})
	down.Containers[0].Previous = resourcesOf(values{reqCPU: "500m", limCPU: "500m"})
	b, err = k.Check(ctx, down)
	require.NoError(t, err)
	assert.Nil(t, b)
}
