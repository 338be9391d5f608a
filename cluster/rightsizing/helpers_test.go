package rightsizing

// The package's internal tests' helpers. Tests that run a whole leader
// replica are in package rightsizing_test, with test/leadertest.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// newRecommendation creates recommendation web for Deployment web in ns,
// asking 500m and 128Mi, with strategy.
func newRecommendation(t *testing.T, c client.Client, ns string, strategy v1alpha1.Strategy) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	cpu, mem := resource.MustParse("500m"), resource.MustParse("128Mi")
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:   strategy,
			Containers: []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: &cpu, Memory: &mem}}},
		},
	}
	require.NoError(t, c.Create(context.Background(), rsr))
	return rsr
}

// readRecommendation reads recommendation ns/web.
func readRecommendation(t *testing.T, c client.Client, ns string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rsr))
	return &rsr
}
