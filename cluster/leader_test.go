package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

func TestRecommendationWithoutPolicyIsBlocked(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))

	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)
	assert.Contains(t, rsr.Status.Message, "no RightsizingPolicy or ClusterRightsizingPolicy selects Deployment web")
	assert.Nil(t, rsr.Status.Change, "nothing is applied without a policy")
	require.Eventually(t, func() bool {
		return len(kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.ReasonNoPolicy)) == 1
	}, 10*time.Second, 50*time.Millisecond)

	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "500m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "the template is untouched")
}

func TestRolloutIsAppliedAndRecorded(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))

	rsr := kubetest.WaitApplied(t, c, ns, "web")
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
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionApplied), 1)

	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "250m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String())
	assert.Equal(t, "256Mi", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String())

	require.Eventually(t, func() bool { return len(kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, "Applied")) == 1 }, 10*time.Second, 50*time.Millisecond)
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu"), 1)
	assert.Equal(t, 0.0, testutil.ToFloat64(l.Metrics.Actions.WithLabelValues("applied", "Rollout", "memory")))
}

func TestPausedPolicyBlocksUntilUnpaused(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	p := kubetest.NamespacedPolicy(ns, true)
	require.NoError(t, c.Create(ctx, p))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))

	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionBlocked), 1)

	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Paused = false })
	rsr = kubetest.WaitApplied(t, c, ns, "web")
	assert.ElementsMatch(t, []v1alpha1.ResourceName{"cpu", "memory"}, rsr.Status.Change.Resources)
}

// TestPausedAnnotationBlocksOneRecommendationUntilRemoved: the
// kerf.dev/paused annotation (kubectl kerf pause --workload) blocks that
// recommendation's apply under a policy that is not paused, and removing
// it lets the apply go ahead.
func TestPausedAnnotationBlocksOneRecommendationUntilRemoved(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	require.NoError(t, c.Create(ctx, kubetest.NamespacedPolicy(ns, false)))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")
	rsr.Annotations = map[string]string{v1alpha1.PausedAnnotation: "true"}
	require.NoError(t, c.Create(ctx, rsr))

	got := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
	assert.Contains(t, got.Status.Message, v1alpha1.PausedAnnotation)
	assert.Len(t, kubetest.HistoryOf(got, v1alpha1.ActionBlocked), 1)
	assert.Nil(t, got.Status.Change, "nothing applied while paused")

	kubetest.Update(t, c, got, func() { delete(got.Annotations, v1alpha1.PausedAnnotation) })
	got = kubetest.WaitApplied(t, c, ns, "web")
	assert.ElementsMatch(t, []v1alpha1.ResourceName{"cpu", "memory"}, got.Status.Change.Resources)
}

// TestOnlyOneReplicaLeadsAndLosingTheLeaseStopsIt runs two replicas: one
// leads, and when its Lease is taken from it, it stops with
// ErrLeadershipLost (kerf-leader then exits) and the other takes over.
func TestOnlyOneReplicaLeadsAndLosingTheLeaseStopsIt(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	a := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.Eventually(t, a.Leading, 15*time.Second, 50*time.Millisecond)
	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	time.Sleep(time.Second)
	assert.False(t, b.Leading(), "two replicas lead at once")

	// Another holder takes the Lease, as after a partition (update
	// retries on conflict: the leader renews the Lease every 200 ms).
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-leader"}}
	kubetest.Update(t, c, lease, func() {
		lease.Spec.HolderIdentity = ptr.To("intruder")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(time.Hour)}
	})
	select {
	case err := <-a.Done:
		a.Done <- err // for the cleanup
		assert.ErrorIs(t, err, cluster.ErrLeadershipLost)
	case <-time.After(15 * time.Second):
		t.Fatal("the replica that lost its Lease kept running")
	}
}

// TestFailoverMidApplyAppliesOnce stops the leader right after it recorded
// a change and before it applied it, as a crash would; the other replica
// takes over and finishes that change: applied once, recorded once.
func TestFailoverMidApplyAppliesOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, false))

	// The leader dies between recording and applying.
	a := leadertest.StartCrashing(t, ns, func(cfg *cluster.Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation)) {
		cfg.AfterRecord = crash
	})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	a.WaitCrashed(t, "recorded the change")
	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Equal(t, "500m", dep.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "a stopped before applying")
	rsr := kubetest.GetRSR(t, c, ns, "web")
	require.NotNil(t, rsr.Status.Change, "a recorded the change")
	recordedAt := rsr.Status.Change.AppliedAt

	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	require.Eventually(t, b.Leading, 15*time.Second, 50*time.Millisecond)
	rsr = kubetest.WaitApplied(t, c, ns, "web")
	assert.Equal(t, recordedAt, rsr.Status.Change.AppliedAt, "b finished a's change instead of planning a new one")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionApplied), 1, "recorded once")
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
	assert.Len(t, kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, "Applied"), 1)
	total := testutil.ToFloat64(a.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu")) +
		testutil.ToFloat64(b.Metrics.Actions.WithLabelValues("applied", "Rollout", "cpu"))
	assert.Equal(t, 1.0, total)
}

// TestEveryReplicaServesTheWebhook starts two replicas with a self-managed
// certificate: both serve the webhook over TLS with a certificate the
// shared CA signed, whichever of them leads.
func TestEveryReplicaServesTheWebhook(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	src := cert.Source{SelfManaged: cert.Options{Namespace: ns, ServiceName: "kerf-webhook", SecretName: "kerf-webhook-cert",
		ExtraHosts: []string{"127.0.0.1"}, WebhookConfiguration: "kerf-test-absent"}}
	var addrs []string
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs = append(addrs, ln.Addr().String())
		leadertest.StartReplica(t, ns, id, cluster.Config{Webhook: cluster.WebhookConfig{Listener: ln, Cert: src, ClientAuth: webhook.ClientAuth{AllowUnauthenticated: true}}})
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

func TestInPlaceResizesRunningPodsAndWaitsForTheKubelet(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep, pod, _ := leadertest.InPlaceWeb(t, c, ns, kubetest.NamespacedPolicy(ns, false), "250m", "256Mi")

	kubetest.KubeletReports(t, c, pod, "")
	rsr := kubetest.WaitApplied(t, c, ns, "web")
	assert.Equal(t, "250m", pod.Spec.Containers[0].Resources.Requests.Cpu().String(), "resized in place")
	assert.Contains(t, touchedKinds(rsr), "Pod")
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &got))
	assert.Equal(t, "500m", got.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String(), "InPlace leaves the template alone")
}

func touchedKinds(rsr *v1alpha1.RightsizingRecommendation) []string {
	var kinds []string
	for _, o := range rsr.Status.Change.Touched {
		kinds = append(kinds, o.Kind)
	}
	return kinds
}

// TestTheLeaderServesTheActivityPage: the leader's endpoints serve the
// Activity page beside the audit API, from the same cache: a blocked
// recommendation's action is on it.
func TestTheLeaderServesTheActivityPage(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	leadertest.StartReplica(t, ns, "a", cluster.Config{Listener: lis})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)

	var body string
	token := authtest.ReaderToken(t)
	require.Eventually(t, func() bool {
		resp, err := authtest.GetAs("http://"+lis.Addr().String()+"/ui/activity?namespace="+ns, token)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(body, v1alpha1.ReasonNoPolicy)
	}, 15*time.Second, 100*time.Millisecond, "the Activity page never showed the blocked action: %s", body)
	assert.Contains(t, body, "<html")
	assert.Contains(t, body, "blocked")
}

// TestTheLeaderServesItsEndpointsOverTLS: with ListenerCert (kerf-leader
// --metrics-tls) the metrics, the audit API and the pages are HTTPS with
// the stream's certificate, which verifies for the leader's Service name
// against the stream's CA; a plain HTTP request is refused, so no bearer
// token is read off a clear-text connection. Before, the endpoints were
// plain HTTP only.
func TestTheLeaderServesItsEndpointsOverTLS(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	serverCert, pool := kubetest.StreamCert(t, c, ns)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	streamLis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	leadertest.StartReplica(t, ns, "a", cluster.Config{Listener: lis, ListenerCert: &serverCert,
		Stream: cluster.StreamConfig{Listener: streamLis, Cert: serverCert, Audience: "kerf-leader",
			ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}})
	token := authtest.ReaderToken(t)
	verifying := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kerf-leader." + ns + ".svc"}}}

	for _, path := range []string{"/metrics", "/v1/audit?namespace=" + ns, "/ui/activity?namespace=" + ns} {
		var code int
		require.Eventually(t, func() bool {
			req, _ := http.NewRequest(http.MethodGet, "https://"+lis.Addr().String()+path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := verifying.Do(req)
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			code = resp.StatusCode
			return code == http.StatusOK
		}, 30*time.Second, 100*time.Millisecond, "GET %s over TLS: %d", path, code)
	}

	resp, err := authtest.GetAs("http://"+lis.Addr().String()+"/metrics", token)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP is refused: %s", body)
	assert.NotContains(t, string(body), "kerf_", "no metrics over plain HTTP")
}

// TestWorkersBelowOneAreRefused: a negative Config.Workers is an error
// naming the field.
func TestWorkersBelowOneAreRefused(t *testing.T) {
	_, err := cluster.New(cluster.Config{Namespace: "kerf-system", LeaseName: "kerf-leader", Identity: "a", Workers: -1}, &rest.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, "workers (-1) must be at least 1")
}

// TestRollbackWorkersBelowNoneAreRefused: a Config.RollbackWorkers below
// NoRollbackWorkers is an error naming the field.
func TestRollbackWorkersBelowNoneAreRefused(t *testing.T) {
	_, err := cluster.New(cluster.Config{Namespace: "kerf-system", LeaseName: "kerf-leader", Identity: "a", RollbackWorkers: -2}, &rest.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, "rollback workers (-2) must be at least 1, 0 for the default (4), or NoRollbackWorkers (-1) for none")
}

// TestANegativeApplyYieldIsRefused: a Config.ApplyYield below zero but
// NoApplyYield is an error naming the field.
func TestANegativeApplyYieldIsRefused(t *testing.T) {
	_, err := cluster.New(cluster.Config{Namespace: "kerf-system", LeaseName: "kerf-leader", Identity: "a", ApplyYield: -time.Second}, &rest.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, "leader config: apply yield (-1s) must be positive, 0 for the default (1s), or NoApplyYield for none")
}

// TestANegativeRollbackBudgetIsRefused: a negative Config.RollbackQPS or
// RollbackBurst is an error naming the fields.
func TestANegativeRollbackBudgetIsRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := cluster.New(cluster.Config{Namespace: "kerf-system", LeaseName: "kerf-leader", Identity: "a", RollbackQPS: -1}, &rest.Config{}, log)
	require.ErrorContains(t, err, "rollback QPS (-1) and burst (0) must be positive")
	_, err = cluster.New(cluster.Config{Namespace: "kerf-system", LeaseName: "kerf-leader", Identity: "a", RollbackBurst: -2}, &rest.Config{}, log)
	require.ErrorContains(t, err, "rollback QPS (0) and burst (-2) must be positive")
}
