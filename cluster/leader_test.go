package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// shared is the package's one control plane: a start costs seconds.
var shared controlplane.Shared

func TestMain(m *testing.M) { shared.Main(m) }

// controlPlane returns the package's control plane, starting it on first
// use; where the binaries are missing the test is skipped, unless
// controlplane.Required says it must run.
func controlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	cp = shared.Get(t)
	return cp
}

// cp is the package's control plane once a test has asked for it.
var cp *controlplane.ControlPlane

var nsCounter atomic.Int32

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kerf-leader-test-"}}
	require.NoError(t, c.Create(context.Background(), ns))
	nsCounter.Add(1)
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

func startLeader(t testing.TB, ns, identity string, cfg Config) *testLeader {
	t.Helper()
	cfg.Namespace, cfg.LeaseName, cfg.Identity = ns, "kerf-leader", identity
	cfg.WatchNamespaces = []string{ns}
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	l, err := New(cfg, cp.Config, log.With("identity", identity))
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
					Name: "app", Image: "kerf.local/kerf-workload:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
					},
				}}},
			},
		},
	}
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

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

func namespacedPolicy(ns string, paused bool) *v1alpha1.RightsizingPolicy {
	p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard"}}
	p.Spec.Guardrails.Paused = paused
	return p
}

func getRSR(t testing.TB, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rsr))
	return &rsr
}

func waitPhase(t testing.TB, c client.Client, ns, name string, phase v1alpha1.Phase, reason string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = getRSR(t, c, ns, name)
		return rsr.Status.Phase == phase && (reason == "" || rsr.Status.Reason == reason)
	}, 30*time.Second, 50*time.Millisecond, "phase %s/%s never reached", phase, reason)
	return rsr
}

// waitApplied waits until the change was applied: the Applied condition is
// true (the phase is Applied, or already Watching).
func waitApplied(t *testing.T, c client.Client, ns, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = getRSR(t, c, ns, name)
		cond := condition(rsr, v1alpha1.ConditionApplied)
		return cond != nil && cond.Status == metav1.ConditionTrue &&
			(rsr.Status.Phase == v1alpha1.PhaseApplied || rsr.Status.Phase == v1alpha1.PhaseWatching)
	}, 30*time.Second, 50*time.Millisecond, "the change was never applied")
	return rsr
}

func eventsFor(t *testing.T, c client.Client, ns, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func historyOf(rsr *v1alpha1.RightsizingRecommendation, typ v1alpha1.ActionType) []v1alpha1.Action {
	var out []v1alpha1.Action
	for _, a := range rsr.Status.History {
		if a.Type == typ {
			out = append(out, a)
		}
	}
	return out
}

func TestRecommendationWithoutPolicyIsBlocked(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, deployment(ns, "web", "500m", "256Mi")))
	startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))

	rsr := waitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)
	assert.Contains(t, rsr.Status.Message, "no RightsizingPolicy or ClusterRightsizingPolicy selects Deployment web")
	assert.Nil(t, rsr.Status.Change, "nothing is applied without a policy")
	require.Eventually(t, func() bool { return len(eventsFor(t, c, ns, "web", v1alpha1.ReasonNoPolicy)) == 1 }, 10*time.Second, 50*time.Millisecond)

	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "500m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "the template is untouched")
}

func TestRolloutIsAppliedAndRecorded(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, deployment(ns, "web", "500m", "256Mi")))
	require.NoError(t, c.Create(ctx, namespacedPolicy(ns, false)))
	l := startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))

	rsr := waitApplied(t, c, ns, "web")
	require.NotNil(t, rsr.Status.Change)
	ch := rsr.Status.Change
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, ch.Resources, "only cpu differs")
	require.Len(t, ch.Containers, 1)
	assert.Equal(t, "500m", ch.Containers[0].Previous.Requests.CPU.String())
	assert.Equal(t, "250m", ch.Containers[0].Applied.Requests.CPU.String())
	assert.NotEmpty(t, ch.ValueFingerprint)
	assert.NotEmpty(t, ch.PolicyFingerprint)
	require.NotNil(t, rsr.Status.Policy)
	assert.Equal(t, "guard", rsr.Status.Policy.Name)
	assert.Len(t, historyOf(rsr, v1alpha1.ActionApplied), 1)

	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "250m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String())
	assert.Equal(t, "256Mi", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String())

	require.Eventually(t, func() bool { return len(eventsFor(t, c, ns, "web", "Applied")) == 1 }, 10*time.Second, 50*time.Millisecond)
	counts(t, l.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu"), 1)
	assert.Equal(t, 0.0, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("applied", "Rollout", "memory")))
}

func TestPausedPolicyBlocksUntilUnpaused(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, deployment(ns, "web", "500m", "256Mi")))
	p := namespacedPolicy(ns, true)
	require.NoError(t, c.Create(ctx, p))
	startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))

	rsr := waitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
	assert.Len(t, historyOf(rsr, v1alpha1.ActionBlocked), 1)

	update(t, c, p, func() { p.Spec.Guardrails.Paused = false })
	rsr = waitApplied(t, c, ns, "web")
	assert.ElementsMatch(t, []v1alpha1.ResourceName{"cpu", "memory"}, rsr.Status.Change.Resources)
}

// TestOnlyOneReplicaLeadsAndLosingTheLeaseStopsIt runs two replicas: one
// leads, and when its Lease is taken from it, it stops with
// ErrLeadershipLost (kerf-leader then exits) and the other takes over.
func TestOnlyOneReplicaLeadsAndLosingTheLeaseStopsIt(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	a := startLeader(t, ns, "a", Config{})
	require.Eventually(t, a.Leading, 15*time.Second, 50*time.Millisecond)
	b := startLeader(t, ns, "b", Config{})
	time.Sleep(time.Second)
	assert.False(t, b.Leading(), "two replicas lead at once")

	// Another holder takes the Lease, as after a partition (update
	// retries on conflict: the leader renews the Lease every 200 ms).
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-leader"}}
	update(t, c, lease, func() {
		lease.Spec.HolderIdentity = ptr.To("intruder")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(time.Hour)}
	})
	select {
	case err := <-a.done:
		a.done <- err // for the cleanup
		assert.ErrorIs(t, err, ErrLeadershipLost)
	case <-time.After(15 * time.Second):
		t.Fatal("the replica that lost its Lease kept running")
	}
}

// TestFailoverMidApplyAppliesOnce stops the leader right after it recorded
// a change and before it applied it, as a crash would; the other replica
// takes over and finishes that change: applied once, recorded once.
func TestFailoverMidApplyAppliesOnce(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, deployment(ns, "web", "500m", "256Mi")))
	require.NoError(t, c.Create(ctx, namespacedPolicy(ns, false)))

	recorded := make(chan struct{})
	var a *testLeader
	a = startLeader(t, ns, "a", Config{AfterRecord: func(ctx context.Context, _ *v1alpha1.RightsizingRecommendation) {
		close(recorded)
		a.crash(ctx) // the leader dies between recording and applying
	}})
	require.Eventually(t, a.Leading, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("leader a never recorded the change")
	}
	err := <-a.done // a has stopped acting
	a.done <- err   // for the cleanup
	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "500m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "a stopped before applying")
	rsr := getRSR(t, c, ns, "web")
	require.NotNil(t, rsr.Status.Change, "a recorded the change")
	recordedAt := rsr.Status.Change.AppliedAt

	b := startLeader(t, ns, "b", Config{})
	require.Eventually(t, b.Leading, 15*time.Second, 50*time.Millisecond)
	rsr = waitApplied(t, c, ns, "web")
	assert.Equal(t, recordedAt, rsr.Status.Change.AppliedAt, "b finished a's change instead of planning a new one")
	assert.Len(t, historyOf(rsr, v1alpha1.ActionApplied), 1, "recorded once")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "250m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String())
	// Generations: created, the template patched once, and the
	// kerf.dev/rollback-state annotation written when the watch started (a
	// Deployment counts annotation changes in its generation too).
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
		return dep.Annotations[v1alpha1.RollbackStateAnnotation] != ""
	}, 10*time.Second, 20*time.Millisecond, "the watch never started")
	assert.Equal(t, int64(3), dep.Generation, "the template was patched once")
	time.Sleep(500 * time.Millisecond)
	assert.Len(t, eventsFor(t, c, ns, "web", "Applied"), 1)
	total := testutil.ToFloat64(a.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu")) +
		testutil.ToFloat64(b.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu"))
	assert.Equal(t, 1.0, total)
}

// TestEveryReplicaServesTheWebhook starts two replicas with a self-managed
// certificate: both serve the webhook over TLS with a certificate the
// shared CA signed, whichever of them leads.
func TestEveryReplicaServesTheWebhook(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	src := cert.Source{SelfManaged: cert.Options{Namespace: ns, ServiceName: "kerf-webhook", SecretName: "kerf-webhook-cert",
		ExtraHosts: []string{"127.0.0.1"}, WebhookConfiguration: "kerf-test-absent"}}
	var addrs []string
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs = append(addrs, ln.Addr().String())
		startLeader(t, ns, id, Config{Webhook: WebhookConfig{Listener: ln, Cert: src}})
	}
	var secret corev1.Secret
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kerf-webhook-cert"}, &secret) == nil
	}, 15*time.Second, 50*time.Millisecond)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(secret.Data["ca.crt"]))
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, addr := range addrs {
		require.Eventually(t, func() bool {
			resp, err := hc.Get("https://" + addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 15*time.Second, 100*time.Millisecond, "replica at %s does not serve the webhook", addr)
	}
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
	res := pod.Spec.Containers[0].Resources.DeepCopy()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Resources: res,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	require.NoError(t, c.Status().Update(ctx, pod))
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

func TestInPlaceResizesRunningPodsAndWaitsForTheKubelet(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	dep := deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	pod := runningPod(t, c, dep)
	require.NoError(t, c.Create(ctx, namespacedPolicy(ns, false)))
	startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "256Mi")))

	kubeletReports(t, c, pod, "")
	rsr := waitApplied(t, c, ns, "web")
	assert.Equal(t, "250m", pod.Spec.Containers[0].Resources.Requests.Cpu().String(), "resized in place")
	assert.Contains(t, touchedKinds(rsr), "Pod")
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, "500m", got.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "InPlace leaves the template alone")
}

func TestInfeasibleResizeFailsWithTheReason(t *testing.T) {
	c := controlPlane(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	dep := deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	pod := runningPod(t, c, dep)
	require.NoError(t, c.Create(ctx, namespacedPolicy(ns, false)))
	l := startLeader(t, ns, "a", Config{})
	require.NoError(t, c.Create(ctx, recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "1", "256Mi")))

	kubeletReports(t, c, pod, corev1.PodReasonInfeasible)
	rsr := waitPhase(t, c, ns, "web", v1alpha1.PhaseFailed, "Infeasible")
	assert.Contains(t, rsr.Status.Message, "Node didn't have enough capacity")
	failed := historyOf(rsr, v1alpha1.ActionFailed)
	require.Len(t, failed, 1)
	assert.Equal(t, "Infeasible", failed[0].Reason)
	assert.Empty(t, historyOf(rsr, v1alpha1.ActionApplied))
	require.Eventually(t, func() bool { return len(eventsFor(t, c, ns, "web", "ApplyFailed")) == 1 }, 10*time.Second, 50*time.Millisecond)
	counts(t, l.Metrics.Actions.WithLabelValues("failed", "Infeasible", "cpu"), 1)
}

func touchedKinds(rsr *v1alpha1.RightsizingRecommendation) []string {
	var kinds []string
	for _, o := range rsr.Status.Change.Touched {
		kinds = append(kinds, o.Kind)
	}
	return kinds
}
