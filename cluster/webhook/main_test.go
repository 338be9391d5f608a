package webhook

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// shared is the package's one control plane: a start costs seconds.
var shared = controlplane.Shared{}

func TestMain(m *testing.M) { shared.Main(m) }

// controlPlane returns the package's control plane, starting it on first
// use; where the binaries are missing the test is skipped, unless
// controlplane.Required says it must run.
func controlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	return shared.Get(t)
}

var nameSeq atomic.Int64

// uniqueName returns a fresh object name starting with prefix.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

// testLogger logs into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
