// Package e2e runs Kerf's end-to-end scenarios on a real one-node cluster
// (internal/sandbox): Kerf is built into images, installed with
// `kubectl apply -k manifests/`, and real workloads are OOM-killed,
// throttled and crashed after a change (internal/scenario). The tests assert
// the end states in the apiserver, in Kerf's metrics and in the kernel.
// Before them, on the same sandbox without Kerf, TestHelmInstallUpgradeUninstall
// installs, upgrades and uninstalls the Helm chart charts/kerf.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/internal/scenario"
	"github.com/kerf-dev/kerf/test/controlplane"
)

var (
	setupOnce   sync.Once
	prepareOnce sync.Once
	installed   *scenario.Installed
	setupErr    error
	skipWhy     string
	stateDir    string
	repoRoot    string
	unlock      func()
	// withVMNode says whether the sandbox gets its VM node (cgroup v2):
	// always under make test, elsewhere where the machine can boot it.
	withVMNode bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if stateDir != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := sandbox.Down(context.Background(), stateDir, log); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: sandbox down: %v\n", err)
			code = 1
		}
	}
	if unlock != nil {
		unlock()
	}
	os.Exit(code)
}

// cluster returns the sandbox with Kerf installed, bringing it up for the
// first test that asks; it skips (or, under make test, fails) where the
// machine cannot run it.
func cluster(t testing.TB) *scenario.Installed {
	t.Helper()
	setupOnce.Do(setup)
	if skipWhy != "" {
		if controlplane.Required() {
			t.Fatal(skipWhy)
		}
		t.Skip(skipWhy)
	}
	if setupErr != nil {
		t.Fatalf("setting up the sandbox with Kerf: %v", setupErr)
	}
	return installed
}

// prepare takes the machine's sandbox lock and picks the state directory,
// once: the Helm test (helm_test.go) brings the sandbox up without Kerf
// before setup installs Kerf from manifests/ on the same sandbox.
func prepare() {
	if os.Geteuid() != 0 {
		skipWhy = "the sandbox cluster needs root (mounts, cgroups, bridge, iptables)"
		return
	}
	if repoRoot, setupErr = kube.RepoRoot(); setupErr != nil {
		return
	}
	// The other packages' sandboxes (internal/sandbox's two, the
	// integration tests') come first on a busy machine: wait for them,
	// within make test's 60 minutes, which leave 30 for this run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if unlock, setupErr = sandbox.Lock(ctx); setupErr != nil {
		return
	}
	if stateDir, setupErr = os.MkdirTemp("/var/tmp", "kerf-e2e-"); setupErr != nil {
		return
	}
	withVMNode = true
	if err := sandbox.CanRunVMNode(""); err != nil {
		if controlplane.Required() {
			setupErr = fmt.Errorf("the sandbox's VM node (cgroup v2) cannot run: %w", err)
			return
		}
		say("no VM node (cgroup v2) in this sandbox, its tests skip: %v", err)
		withVMNode = false
	}
	_ = os.Remove(stateDir) // Up creates it
}

func setup() {
	prepareOnce.Do(prepare)
	if skipWhy != "" || setupErr != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	installed, setupErr = scenario.Install(ctx, scenario.InstallOptions{RepoRoot: repoRoot, StateDir: stateDir, Log: warnLog(), Say: say, VMNode: withVMNode})
}

// warnLog logs the sandbox's warnings to stderr.
func warnLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// say narrates the setup's steps on stderr.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "e2e %s: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// env returns a scenario environment in a fresh namespace.
func env(t *testing.T, in *scenario.Installed) *scenario.Env {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + strings.ToLower(t.Name()[4:min(len(t.Name()), 20)]) + "-"}}
	ns.GenerateName = strings.NewReplacer("_", "-", "/", "-").Replace(ns.GenerateName)
	if err := in.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	e := &scenario.Env{Client: in.Client, Namespace: ns.Name, Out: testWriter{t}}
	t.Cleanup(func() {
		if t.Failed() {
			ctx := context.Background()
			rsrs, _ := in.Run(ctx, "-n", e.Namespace, "get", "rsr,pods,events", "-o", "yaml")
			t.Logf("recommendations, pods and events in %s:\n%s", e.Namespace, rsrs)
			kerf, _ := in.Run(ctx, "-n", scenario.KerfNamespace, "get", "pods,lease", "-o", "wide", "-L", "kerf.dev/leader")
			t.Logf("Kerf:\n%s", kerf)
			t.Logf("leader logs:\n%s", in.Logs(context.Background(), "leader"))
			t.Logf("agent logs:\n%s", in.Logs(context.Background(), "agent"))
			if r := in.Restarts(ctx); r != "" {
				t.Logf("Kerf's restarts and warnings:\n%s", r)
			}
		}
	})
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// events returns the Warning events with reason about the object named name
// of kind in the namespace.
func events(ctx context.Context, c client.Client, ns, kind, name, reason string) ([]corev1.Event, error) {
	return eventsOfType(ctx, c, ns, kind, name, reason, corev1.EventTypeWarning)
}

// eventsOfType returns the events of type typ (Normal, Warning) with reason
// about the object named name of kind in the namespace.
func eventsOfType(ctx context.Context, c client.Client, ns, kind, name, reason, typ string) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason && ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out, nil
}
