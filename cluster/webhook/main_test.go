package webhook

import (
	"log/slog"
	"testing"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// testLogger logs into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
