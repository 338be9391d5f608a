package recommender

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{})
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-recommender-test-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}
