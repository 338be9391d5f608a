package dashboard_test

import (
	"testing"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{})
}
