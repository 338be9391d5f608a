package leadertest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// Replica runs one leader replica until the test ends or Stop is called.
type Replica struct {
	*cluster.Leader
	Stop func()
	Done chan error
}

// Crash stops the leader from inside one of its reconciles and returns only
// once that reconcile's context is cancelled, so the reconcile does nothing
// more, as after a crash. The manager cancels its controllers' contexts
// some time after Run's context ends, not at once.
func (tl *Replica) Crash(ctx context.Context) {
	tl.Stop()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		panic("the reconcile's context outlived the stopped leader by 30s")
	}
}

// StartReplica starts leader replica identity in ns with cfg, on short
// lease timings unless cfg sets its own, and stops it when the test ends.
// It watches ns alone unless cfg.WatchNamespaces names others.
func StartReplica(t testing.TB, ns, identity string, cfg cluster.Config) *Replica {
	t.Helper()
	return StartReplicaOn(t, controlplane.Get(t).Config, ns, identity, cfg)
}

// StartReplicaOn is StartReplica with the REST config rc.
func StartReplicaOn(t testing.TB, rc *rest.Config, ns, identity string, cfg cluster.Config) *Replica {
	t.Helper()
	cfg.Namespace, cfg.LeaseName, cfg.Identity = ns, "kerf-leader", identity
	if len(cfg.WatchNamespaces) == 0 {
		cfg.WatchNamespaces = []string{ns}
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	l, err := cluster.New(cfg, rc, log.With("identity", identity))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tl := &Replica{Leader: l, Stop: cancel, Done: make(chan error, 1)}
	go func() { tl.Done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-tl.Done
	})
	return tl
}

// WatchedWeb creates the Deployment web (500m, 256Mi) and policy in ns,
// starts leader "a" with cfg, asks for cpu and mem with strategy Rollout
// and returns once the change is watched.
func WatchedWeb(t *testing.T, c client.Client, ns string, policy *v1alpha1.RightsizingPolicy, cfg cluster.Config, cpu, mem string) (*appsv1.Deployment, *Replica) {
	t.Helper()
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, policy)
	l := StartReplica(t, ns, "a", cfg)
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, cpu, mem)))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	return dep, l
}

// Pair starts leader a with cfgA, waits until it leads, and starts
// b with cfgB as its standby.
func Pair(t testing.TB, ns string, cfgA, cfgB cluster.Config) (a, b *Replica) {
	t.Helper()
	a = StartReplica(t, ns, "a", cfgA)
	kubetest.WaitFor(t, 30*time.Second, a.Leading, "a never led")
	return a, StartReplica(t, ns, "b", cfgB)
}

// FailOver stops a, the leader, and waits until b leads.
func FailOver(t testing.TB, a, b *Replica) {
	t.Helper()
	a.Stop()
	kubetest.WaitFor(t, 30*time.Second, b.Leading, "b never led")
}

// WaitGracefulStop waits until l, stopped, has returned from its run, and
// fails the test unless it returned nil, as on SIGTERM.
func WaitGracefulStop(t testing.TB, l *Replica) {
	t.Helper()
	select {
	case err := <-l.Done:
		l.Done <- err // for the cleanup
		if err != nil {
			t.Fatalf("a stopped with %v, want nil on a graceful stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a never stopped")
	}
}

// Crashing is leader "a" with a hook that stops it from inside the
// reconcile that runs the hook, as a crash there would.
type Crashing struct {
	*Replica
	Crashed chan struct{}
}

// StartCrashing starts a Crashing in ns and waits until it
// leads; at installs the crash in the Config (as AfterRecord or
// AfterBreach).
func StartCrashing(t *testing.T, ns string, at func(cfg *cluster.Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation))) *Crashing {
	t.Helper()
	cl := &Crashing{Crashed: make(chan struct{})}
	var cfg cluster.Config
	at(&cfg, func(ctx context.Context, _ *v1alpha1.RightsizingRecommendation) {
		close(cl.Crashed)
		cl.Crash(ctx)
	})
	cl.Replica = StartReplica(t, ns, "a", cfg)
	require.Eventually(t, cl.Leading, 15*time.Second, 50*time.Millisecond)
	return cl
}

// WaitCrashed waits until the leader crashed at its hook and has stopped
// acting; what says what the hook marks, for the failure message.
func (cl *Crashing) WaitCrashed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-cl.Crashed:
	case <-time.After(30 * time.Second):
		t.Fatalf("leader a never %s", what)
	}
	err := <-cl.Done // a has stopped acting
	cl.Done <- err   // for the cleanup
}

// InPlaceWeb creates the Deployment web (500m, 256Mi) with one running pod
// and policy p in ns, starts leader "a" and asks for cpu and mem with
// strategy InPlace. It returns the Deployment, the pod and the leader.
func InPlaceWeb(t *testing.T, c client.Client, ns string, p *v1alpha1.RightsizingPolicy, cpu, mem string) (*appsv1.Deployment, *corev1.Pod, *Replica) {
	t.Helper()
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, p)
	pod := kubetest.RunningPod(t, c, dep)
	l := StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, cpu, mem)))
	return dep, pod, l
}

// RecommendedWeb creates the Deployment web (500m, 256Mi) under a
// RecommendingPolicy in a new namespace: RecommendedWebUnder that policy.
func RecommendedWeb(t *testing.T, before func(*signals.Stores, *corev1.Pod)) (client.Client, string, *Replica) {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	return RecommendedWebUnder(t, c, ns, kubetest.RecommendingPolicy(ns), before)
}

// RecommendedWebUnder creates the Deployment web (500m, 256Mi) under
// policy p in ns and runs an adopted pod. After before (given the
// leader's stores), it feeds the usage store four readings one second
// apart of a container using 50m and 40Mi, then starts a leader whose
// recommender reads every 200 ms.
func RecommendedWebUnder(t *testing.T, c client.Client, ns string, p *v1alpha1.RightsizingPolicy, before func(*signals.Stores, *corev1.Pod)) (client.Client, string, *Replica) {
	t.Helper()
	dep := kubetest.Web(t, c, ns, p)
	sig := signals.New()
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	if before != nil {
		before(sig, pod)
	}
	now := time.Now()
	for i := range 4 {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: now.Add(time.Duration(i-3) * time.Second),
			CPU: time.Duration(i) * 50 * time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20})
	}
	// The leader starts once the pod, what the test adds and the usage
	// are in place: its first pass sees them all, and none of them lands
	// between two passes (on a loaded machine the first recommendation was
	// written without the latch of what came a moment later).
	l := StartReplica(t, ns, "a", cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond}})
	return c, ns, l
}

// MetricValue is the value of the leader's series name whose labels hold
// all of labels (a gauge or a counter), -1 when absent.
func MetricValue(t *testing.T, l *Replica, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := l.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] }) {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
