package recommender

import (
	"testing"

	"github.com/stretchr/testify/assert"
	vpav1 "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1"
	"k8s.io/utils/ptr"
)

// TestVPAModesKerfTakesTargetsFrom checks which updateModes Kerf accepts:
// only those in which VPA never changes a running pod.
func TestVPAModesKerfTakesTargetsFrom(t *testing.T) {
	for _, tc := range []struct {
		mode *vpav1.UpdateMode
		want vpav1.UpdateMode
		ok   bool
	}{
		{ptr.To(vpav1.UpdateModeOff), vpav1.UpdateModeOff, true},
		{ptr.To(vpav1.UpdateModeInitial), vpav1.UpdateModeInitial, true},
		{nil, vpav1.UpdateModeRecreate, false}, // VPA's default
		{ptr.To(vpav1.UpdateModeRecreate), vpav1.UpdateModeRecreate, false},
		{ptr.To(vpav1.UpdateMode("Auto")), "Auto", false},
		{ptr.To(vpav1.UpdateModeInPlaceOrRecreate), vpav1.UpdateModeInPlaceOrRecreate, false},
		{ptr.To(vpav1.UpdateModeInPlace), vpav1.UpdateModeInPlace, false},
	} {
		vpa := &vpav1.VerticalPodAutoscaler{}
		if tc.mode != nil {
			vpa.Spec.UpdatePolicy = &vpav1.PodUpdatePolicy{UpdateMode: tc.mode}
		}
		mode, ok := vpaModeOf(vpa)
		assert.Equal(t, tc.want, mode)
		assert.Equal(t, tc.ok, ok, "mode %s", mode)
	}
	mode, ok := vpaModeOf(&vpav1.VerticalPodAutoscaler{Spec: vpav1.VerticalPodAutoscalerSpec{UpdatePolicy: &vpav1.PodUpdatePolicy{}}})
	assert.Equal(t, vpav1.UpdateModeRecreate, mode, "a policy without a mode is VPA's default")
	assert.False(t, ok)
}
