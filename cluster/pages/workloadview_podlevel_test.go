package pages

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// The workload page shows a (pod) entry beside the pod template's
// pod-level values, as it shows a container's beside the container's.
func TestContainerValuesShowThePodLevelManifest(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app"}},
		Resources:  &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}},
	}}
	rsr := &v1alpha1.RightsizingRecommendation{Spec: v1alpha1.RightsizingRecommendationSpec{Containers: []v1alpha1.ContainerResources{
		{Name: v1alpha1.PodLevel, Limits: &v1alpha1.ResourceValues{Memory: ptr.To(resource.MustParse("384Mi"))}},
	}}}
	got := containerValues(rsr, &workload.Workload{Kind: v1alpha1.KindDeployment, Template: tmpl})
	require.Len(t, got, 2)
	assert.Equal(t, v1alpha1.PodLevel, got[0].Name)
	require.NotNil(t, got[0].Manifest, "the template's pod-level values")
	assert.Equal(t, "512Mi", got[0].Manifest.Limits.Memory.String())
	assert.Equal(t, "app", got[1].Name)
}
