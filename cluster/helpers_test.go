package cluster

// The package's test helpers: its control plane, leaders, workloads,
// recommendations and policies, what kubelets and agents report, and the
// waits on what the leader records.

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/hubtest"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{Teardown: hubtest.StopPostgres})
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-leader-test-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

// testLeader runs one leader replica until the test ends or stop is called.
type testLeader struct {
	*Leader
	stop func()
	done chan error
}

// crash stops the leader from inside one of its reconciles and returns only
// once that reconcile's context is cancelled, so the reconcile does nothing
// more, as after a crash. The manager cancels its controllers' contexts
// some time after Run's context ends, not at once.
func (tl *testLeader) crash(ctx context.Context) {
	tl.stop()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		panic("the reconcile's context outlived the stopped leader by 30s")
	}
}

// startLeader starts leader replica identity in ns with cfg, on short
// lease timings unless cfg sets its own, and stops it when the test ends.
func startLeader(t testing.TB, ns, identity string, cfg Config) *testLeader {
	t.Helper()
	return startLeaderOn(t, controlplane.Get(t).Config, ns, identity, cfg)
}

// startLeaderOn is startLeader with the REST config rc.
func startLeaderOn(t testing.TB, rc *rest.Config, ns, identity string, cfg Config) *testLeader {
	t.Helper()
	cfg.Namespace, cfg.LeaseName, cfg.Identity = ns, "kerf-leader", identity
	cfg.WatchNamespaces = []string{ns}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	l, err := New(cfg, rc, log.With("identity", identity))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tl := &testLeader{Leader: l, stop: cancel, done: make(chan error, 1)}
	go func() { tl.done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-tl.done
	})
	return tl
}

// deployment is a one-replica Deployment whose one container app asks
// for cpu and mem (requests equal to limits).
func deployment(ns, name string, cpu, mem string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "kerf.local/kerf-workload:dev",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
					},
				}}},
			},
		},
	}
}

// q parses a quantity.
func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

// recommendation asks for cpu and mem (requests equal to limits) for
// container app of Deployment target, with strategy.
func recommendation(ns, name, target string, strategy v1alpha1.Strategy, cpu, mem string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: target},
			Strategy:  strategy,
			Containers: []v1alpha1.ContainerResources{{
				Name:     "app",
				Requests: &v1alpha1.ResourceValues{CPU: q(cpu), Memory: q(mem)},
				Limits:   &v1alpha1.ResourceValues{CPU: q(cpu), Memory: q(mem)},
			}},
		},
	}
}

// namespacedPolicy is a RightsizingPolicy selecting every workload in ns.
func namespacedPolicy(ns string, paused bool) *v1alpha1.RightsizingPolicy {
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard"}}
	p.Spec.Guardrails.Paused = paused
	return p
}

// getRSR reads recommendation ns/name.
func getRSR(t testing.TB, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	return &rsr
}

// waitRSR reads recommendation ns/name every 50 ms until done holds for
// it, and returns it; after 30 s the test fails with msgAndArgs.
func waitRSR(t testing.TB, c client.Client, ns, name string, done func(*v1alpha1.RightsizingRecommendation) bool, msgAndArgs ...any) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = getRSR(t, c, ns, name)
		return done(rsr)
	}, 30*time.Second, 50*time.Millisecond, msgAndArgs...)
	return rsr
}

// waitPhase waits until the recommendation has phase and, unless empty,
// reason, and returns it.
func waitPhase(t testing.TB, c client.Client, ns, name string, phase v1alpha1.Phase, reason string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return waitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Phase == phase && (reason == "" || rsr.Status.Reason == reason)
	}, "phase %s/%s never reached", phase, reason)
}

// waitApplied waits until the change was applied: the Applied condition is
// true (the phase is Applied, or already Watching).
func waitApplied(t *testing.T, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return waitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		cond := condition(rsr, v1alpha1.ConditionApplied)
		return cond != nil && cond.Status == metav1.ConditionTrue &&
			(rsr.Status.Phase == v1alpha1.PhaseApplied || rsr.Status.Phase == v1alpha1.PhaseWatching)
	}, "the change was never applied")
}

// eventsFor lists the Events in ns about objects named name with reason,
// and fails the test for one of them whose type (Normal or Warning) is
// not typ: an Event's type is part of what users see.
func eventsFor(t *testing.T, c client.Client, ns, name, typ, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	for _, e := range out {
		assert.Equal(t, typ, e.Type, "type of the %s Event about %s: %s", reason, name, e.Note)
	}
	return out
}

// historyOf is the recommendation's history entries of type typ.
func historyOf(rsr *v1alpha1.RightsizingRecommendation, typ v1alpha1.ActionType) []v1alpha1.Action {
	var out []v1alpha1.Action
	for _, a := range rsr.Status.History {
		if a.Type == typ {
			out = append(out, a)
		}
	}
	return out
}

// runningPod creates the Deployment's current ReplicaSet and one Running
// pod of it, as the controller-manager and a kubelet would (none runs in
// these tests), and returns the pod.
func runningPod(t *testing.T, c client.Client, dep *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": dep.Name, "pod-template-hash": "h1"}
	tmpl := *dep.Spec.Template.DeepCopy()
	tmpl.Labels = labels
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	require.NoError(t, c.Create(ctx, rs))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-h1-x", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node(t, c)
	require.NoError(t, c.Create(ctx, pod))
	markRunning(t, c, pod)
	return pod
}

// node makes sure the Node the test pods run on exists, with room for
// them: the apiserver checks a resize against the node's allocatable.
func node(t testing.TB, c client.Client) string {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	if err := c.Create(ctx, n); err != nil {
		require.True(t, apierrors.IsAlreadyExists(err), "create node: %v", err)
		return n.Name
	}
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room}
	require.NoError(t, c.Status().Update(ctx, n))
	return n.Name
}

// kubeletReports writes what a kubelet would after a resize: either the
// values it now runs, or a PodResizePending condition with reason.
func kubeletReports(t *testing.T, c client.Client, pod *corev1.Pod, pendingReason string) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			var l v1alpha1.RightsizingRecommendationList
			_ = c.List(ctx, &l, client.InNamespace(pod.Namespace))
			for _, r := range l.Items {
				t.Logf("recommendation %s: %s %s: %s", r.Name, r.Status.Phase, r.Status.Reason, r.Status.Message)
			}
		}
	})
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
		return pod.Generation > 1 // the resize reached the pod
	}, 20*time.Second, 50*time.Millisecond, "the pod was never resized")
	pod.Status.ObservedGeneration = pod.Generation
	if pendingReason != "" {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: pendingReason,
			Message: "Node didn't have enough capacity: cpu, requested: 64000, capacity: 2000", ObservedGeneration: pod.Generation,
			LastTransitionTime: metav1.Now(),
		})
	} else {
		pod.Status.ContainerStatuses[0].Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	}
	require.NoError(t, c.Status().Update(ctx, pod))
}

// counts waits until counter reads want: the leader counts an action just
// after the status update that records it.
func counts(t *testing.T, counter prometheus.Counter, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return testutil.ToFloat64(counter) == want }, 10*time.Second, 20*time.Millisecond,
		"the counter reads %v, want %v", testutil.ToFloat64(counter), want)
}

// update reads obj, applies mutate and writes it back, again on a conflict
// (the leader writes the status of the same objects meanwhile).
func update(t *testing.T, c client.Client, obj client.Object, mutate func()) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return c.Update(context.Background(), obj)
	}))
}

// policyWith is a namespaced policy with a short watch, for tests that
// run the watch to its end in real time.
func policyWith(ns string, watchFor time.Duration, mutate func(*v1alpha1.RollbackGuardrails)) *v1alpha1.RightsizingPolicy {
	p := namespacedPolicy(ns, false)
	p.Spec.Guardrails.Rollback.WatchDuration = &metav1.Duration{Duration: watchFor}
	if mutate != nil {
		mutate(&p.Spec.Guardrails.Rollback)
	}
	return p
}

// adoptedPod creates a Running pod of the Deployment's new template, owned
// by a ReplicaSet of that template (as the controller-manager would after a
// Rollout; none runs here) and returns it.
func adoptedPod(t testing.TB, c client.Client, dep *appsv1.Deployment, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: fmt.Sprintf("%s-g%d", dep.Name, dep.Generation), Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: dep.Spec.Selector, Template: *dep.Spec.Template.DeepCopy()},
	}
	if err := c.Create(ctx, rs); apierrors.IsAlreadyExists(err) {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(rs), rs))
	} else {
		require.NoError(t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: name, Labels: dep.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Spec: *dep.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node(t, c)
	require.NoError(t, c.Create(ctx, pod))
	markRunning(t, c, pod)
	return pod
}

// oomKilled writes what a kubelet reports after the container was
// OOM-killed and restarted. Status times have one-second resolution and a
// termination counts when it finished after appliedAt, so it waits for the
// next second first.
func oomKilled(t *testing.T, c client.Client, pod *corev1.Pod, reason string) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	cs := &pod.Status.ContainerStatuses[0]
	cs.RestartCount++
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: reason, StartedAt: metav1.NewTime(time.Now().Add(-time.Second)), FinishedAt: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, pod))
}

// web creates the Deployment web (500m, 256Mi) and policy p in ns, and
// returns the Deployment.
func web(t testing.TB, c client.Client, ns string, p *v1alpha1.RightsizingPolicy) *appsv1.Deployment {
	t.Helper()
	dep := deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(context.Background(), dep))
	require.NoError(t, c.Create(context.Background(), p))
	return dep
}

// watchedWeb creates the Deployment web (500m, 256Mi) and policy in ns,
// starts leader "a" with cfg, asks for cpu and mem with strategy Rollout
// and returns once the change is watched.
func watchedWeb(t *testing.T, c client.Client, ns string, policy *v1alpha1.RightsizingPolicy, cfg Config, cpu, mem string) (*appsv1.Deployment, *testLeader) {
	t.Helper()
	ctx := context.Background()
	dep := web(t, c, ns, policy)
	l := startLeader(t, ns, "a", cfg)
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyRollout, cpu, mem)))
	waitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	return dep, l
}

// leaderPair starts leader a with cfgA, waits until it leads, and starts
// b with cfgB as its standby.
func leaderPair(t testing.TB, ns string, cfgA, cfgB Config) (a, b *testLeader) {
	t.Helper()
	a = startLeader(t, ns, "a", cfgA)
	waitFor(t, 30*time.Second, a.Leading, "a never led")
	return a, startLeader(t, ns, "b", cfgB)
}

// failOver stops a, the leader, and waits until b leads.
func failOver(t testing.TB, a, b *testLeader) {
	t.Helper()
	a.stop()
	waitFor(t, 30*time.Second, b.Leading, "b never led")
}

// waitGracefulStop waits until l, stopped, has returned from its run, and
// fails the test unless it returned nil, as on SIGTERM.
func waitGracefulStop(t testing.TB, l *testLeader) {
	t.Helper()
	select {
	case err := <-l.done:
		l.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("a stopped with %v, want nil on a graceful stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a never stopped")
	}
}

// templateResources reads the Deployment and returns the resources of its
// pod template's one container.
func templateResources(t *testing.T, c client.Client, dep *appsv1.Deployment) *corev1.ResourceRequirements {
	t.Helper()
	var got appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(dep), &got))
	return &got.Spec.Template.Spec.Containers[0].Resources
}

// condition returns the recommendation's condition of type typ, or nil.
func condition(rsr *v1alpha1.RightsizingRecommendation, typ string) *metav1.Condition {
	for i := range rsr.Status.Conditions {
		if rsr.Status.Conditions[i].Type == typ {
			return &rsr.Status.Conditions[i]
		}
	}
	return nil
}

// crashingLeader is leader "a" with a hook that stops it from inside the
// reconcile that runs the hook, as a crash there would.
type crashingLeader struct {
	*testLeader
	crashed chan struct{}
}

// startCrashingLeader starts a crashingLeader in ns and waits until it
// leads; at installs the crash in the Config (as AfterRecord or
// AfterBreach).
func startCrashingLeader(t *testing.T, ns string, at func(cfg *Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation))) *crashingLeader {
	t.Helper()
	cl := &crashingLeader{crashed: make(chan struct{})}
	var cfg Config
	at(&cfg, func(ctx context.Context, _ *v1alpha1.RightsizingRecommendation) {
		close(cl.crashed)
		cl.crash(ctx)
	})
	cl.testLeader = startLeader(t, ns, "a", cfg)
	require.Eventually(t, cl.Leading, 15*time.Second, 50*time.Millisecond)
	return cl
}

// waitCrashed waits until the leader crashed at its hook and has stopped
// acting; what says what the hook marks, for the failure message.
func (cl *crashingLeader) waitCrashed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-cl.crashed:
	case <-time.After(30 * time.Second):
		t.Fatalf("leader a never %s", what)
	}
	err := <-cl.done // a has stopped acting
	cl.done <- err   // for the cleanup
}

// markRunning writes the status a kubelet reports for a pod whose one
// container app runs, with the resources of the pod's spec.
func markRunning(t testing.TB, c client.Client, pod *corev1.Pod) {
	t.Helper()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Resources: pod.Spec.Containers[0].Resources.DeepCopy(),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	require.NoError(t, c.Status().Update(context.Background(), pod))
}

// inPlaceWeb creates the Deployment web (500m, 256Mi) with one running pod
// and policy p in ns, starts leader "a" and asks for cpu and mem with
// strategy InPlace. It returns the Deployment, the pod and the leader.
func inPlaceWeb(t *testing.T, c client.Client, ns string, p *v1alpha1.RightsizingPolicy, cpu, mem string) (*appsv1.Deployment, *corev1.Pod, *testLeader) {
	t.Helper()
	ctx := context.Background()
	dep := web(t, c, ns, p)
	pod := runningPod(t, c, dep)
	l := startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, cpu, mem)))
	return dep, pod, l
}

// waitRestored waits until the recommendation's breach is restored, and
// returns it.
func waitRestored(t testing.TB, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return waitRSR(t, c, ns, name, func(rsr *v1alpha1.RightsizingRecommendation) bool {
		return rsr.Status.Breach != nil && rsr.Status.Breach.Restored
	}, "the breach was never restored")
}

// waitEvents waits until n Events with reason, all of type typ, are about
// objects named name, and returns them.
func waitEvents(t *testing.T, c client.Client, ns, name, typ, reason string, n int) []eventsv1.Event {
	t.Helper()
	var evs []eventsv1.Event
	require.Eventually(t, func() bool {
		evs = eventsFor(t, c, ns, name, typ, reason)
		return len(evs) == n
	}, 10*time.Second, 50*time.Millisecond, "want %d %s events about %s", n, reason, name)
	return evs
}

// streamCert gives the agents' stream a self-managed certificate for
// 127.0.0.1 in ns: the server's certificate source, and a pool with the CA
// that signs it for the agents.
func streamCert(t *testing.T, c client.Client, ns string) (cert.Source, *x509.CertPool) {
	t.Helper()
	opts := cert.Options{Namespace: ns, ServiceName: "kerf-leader", SecretName: "kerf-stream-cert", ExtraHosts: []string{"127.0.0.1"}}
	_, _, caPEM, err := cert.EnsureSelfManaged(context.Background(), c, opts)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	return cert.Source{SelfManaged: opts}, pool
}
