package recommender

import (
	"testing"

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
	return controlplane.Namespace(t, c, "kerf-recommender-test-")
}
