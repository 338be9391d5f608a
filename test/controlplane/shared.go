package controlplane

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared is one control plane for a whole test package: a start costs
// seconds, so the package's tests share it. It starts on first use and
// stops when Main's tests are done.
//
//	var shared controlplane.Shared
//	func TestMain(m *testing.M) { shared.Main(m) }
//	func TestX(t *testing.T) { cp := shared.Get(t); ... }
type Shared struct {
	// Options are passed to Start.
	Options Options
	// Setup, when set, runs once after the start, e.g. to register a Node.
	Setup func(*ControlPlane) error
	// Teardown, when set, runs before the stop, e.g. to stop informers
	// whose watches would hold the apiserver's shutdown up.
	Teardown func()

	once sync.Once
	cp   *ControlPlane
	err  error
}

// Get returns the control plane, starting it on first use. Where the
// binaries are missing t is skipped with the reason, unless Required says
// the test must run; any other failure to start fails t.
func (s *Shared) Get(t testing.TB) *ControlPlane {
	t.Helper()
	s.once.Do(func() {
		s.cp, s.err = Start(s.Options)
		if s.err == nil && s.Setup != nil {
			if s.err = s.Setup(s.cp); s.err != nil {
				s.err = fmt.Errorf("set up control plane: %w", s.err)
			}
		}
	})
	if s.err != nil {
		skipOrFail(t, s.err)
	}
	return s.cp
}

// Main runs the package's tests, stops the control plane and exits: call
// it from TestMain.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	if s.cp != nil && s.Teardown != nil {
		s.Teardown()
	}
	if s.cp != nil {
		if err := s.cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
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
