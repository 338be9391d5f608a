package controlplane

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// Hooks shape the control plane a test package shares (Main): a start costs
// seconds, so a package's tests share one.
type Hooks struct {
	// Options are passed to Start.
	Options Options
	// Setup, when set, runs once after the start, e.g. to register a Node.
	Setup func(*ControlPlane) error
	// Teardown, when set, runs before the stop, e.g. to stop informers
	// whose watches would hold the apiserver's shutdown up.
	Teardown func()
}

// shared is the test binary's one control plane, started by the first Get
// and stopped by Main. A test binary is one package, so this is the
// package's control plane; tests receive it from Get.
var shared struct {
	hooks Hooks
	once  sync.Once
	cp    *ControlPlane
	err   error
}

// Main runs the package's tests with the hooks of its shared control plane,
// stops that control plane if a test started it, and exits: call it from
// TestMain.
//
//	func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }
//	func TestX(t *testing.T) { cp := controlplane.Get(t); ... }
func Main(m *testing.M, hooks Hooks) {
	shared.hooks = hooks
	code := m.Run()
	if cp := shared.cp; cp != nil {
		if hooks.Teardown != nil {
			hooks.Teardown()
		}
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Get returns the package's shared control plane, starting it (and running
// the Setup hook given to Main) on first use. Where the binaries are missing
// t is skipped with the reason, unless Required says the test must run; any
// other failure to start fails t.
func Get(t testing.TB) *ControlPlane {
	t.Helper()
	shared.once.Do(func() {
		shared.cp, shared.err = Start(shared.hooks.Options)
		if shared.err == nil && shared.hooks.Setup != nil {
			if shared.err = shared.hooks.Setup(shared.cp); shared.err != nil {
				shared.err = fmt.Errorf("set up control plane: %w", shared.err)
			}
		}
	})
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.cp
}

var nameSeq atomic.Int64

// UniqueName returns a fresh object name starting with prefix, unique in
// the test binary: the tests of a package share one control plane, and
// go test -count=N runs them again on it.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

// skipOrFail ends t after the control plane failed to start: a skip where
// the binaries are missing and a skip is allowed, a failure otherwise.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	var pathErr *os.PathError
	if errors.As(err, &pathErr) && !Required() {
		t.Skipf("real control plane not available: %v", err)
	}
	t.Fatalf("start control plane: %v", err)
}
