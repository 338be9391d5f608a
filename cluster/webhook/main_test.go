package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// One control plane serves every test in the package: a start costs seconds.
var (
	cpOnce sync.Once
	cp     *controlplane.ControlPlane
	cpErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// controlPlane returns the package's control plane with Kerf's CRDs
// installed, starting it on first use. Where the binaries are missing the
// test is skipped, unless controlplane.Required says it must run.
func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cpOnce.Do(func() {
		root, err := controlplane.RepoRoot()
		if err != nil {
			cpErr = err
			return
		}
		cp, cpErr = controlplane.Start(controlplane.Options{
			CRDDirs: []string{filepath.Join(root, "manifests", "crd")},
		})
	})
	if cpErr != nil {
		var pathErr *os.PathError
		if errors.As(cpErr, &pathErr) && !controlplane.Required() {
			t.Skipf("real control plane not available: %v", cpErr)
		}
		t.Fatalf("start control plane: %v", cpErr)
	}
	return cp
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
