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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/cluster/workload"
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
	assert.Contains(t, rsr.Status.Message, "no RightsizingPolicy, ClusterRightsizingPolicy, RollbackPolicy or ClusterRollbackPolicy selects Deployment web")
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

// The leader's cache (cluster/cachestore) as a whole replica reads it:
// what it holds, what a write from a cached pod keeps, and its sizes
// metric. The store's own tests are in cluster/cachestore.

// cachedKinds reads kerf_leader_cached_objects of l: objects held by kind.
func cachedKinds(t *testing.T, l *leadertest.Replica) map[string]float64 {
	t.Helper()
	mfs, err := l.Registry().Gather()
	require.NoError(t, err)
	kinds := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kerf_leader_cached_objects" {
			continue
		}
		for _, m := range mf.GetMetric() {
			kinds[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return kinds
}

// TestTheCacheHoldsEachReplicaSetOnce: finding a pod's workload
// (workload.Of, as the webhook and the pod watch do) reads the ReplicaSet
// the cache already holds whole; asking the cache for its metadata alone
// started a second informer holding every ReplicaSet's metadata again
// (15 MB at 25,000 workloads). kerf_leader_cached_objects counts what each
// kind's informers hold.
func TestTheCacheHoldsEachReplicaSetOnce(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, dep))
	pod := kubetest.RunningPod(t, c, dep)

	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	cache := l.Manager().GetCache()
	// Each kind's informer syncs on its own: the pod can be cached before
	// the Deployment is, so the test waits for both before counting.
	var cached corev1.Pod
	var cachedDep appsv1.Deployment
	require.Eventually(t, func() bool {
		return cache.Get(ctx, client.ObjectKeyFromObject(pod), &cached) == nil &&
			cache.Get(ctx, client.ObjectKeyFromObject(dep), &cachedDep) == nil
	}, 30*time.Second, 50*time.Millisecond)
	ref, ok, err := workload.Of(ctx, l.Manager().GetClient(), &cached)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"}, ref)
	// The metadata alone, as the recommender reads it: from the typed
	// informers (cachestore's getMeta), uncopied.
	views := workload.ReadOnly(l.Manager().GetClient())
	ref, ok, err = workload.OfWith(ctx, &cached, workload.ReplicaSetMetaOf(views, nil))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, workload.Ref{Kind: v1alpha1.KindDeployment, Namespace: ns, Name: "web"}, ref)
	m, err := workload.MetaWith(ctx, views, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}, nil)
	require.NoError(t, err)
	assert.Equal(t, dep.UID, m.UID)

	kinds := cachedKinds(t, l)
	assert.GreaterOrEqual(t, kinds["ReplicaSet"], 1.0, "the ReplicaSets are cached: %v", kinds)
	assert.GreaterOrEqual(t, kinds["Pod"], 1.0, "and the pods: %v", kinds)
	assert.GreaterOrEqual(t, kinds["Deployment"], 1.0, "and the Deployments: %v", kinds)
	assert.NotContains(t, kinds, "ReplicaSet (metadata)", "no second informer of ReplicaSets: %v", kinds)
	assert.NotContains(t, kinds, "Deployment (metadata)", "nor of Deployments: %v", kinds)
}

// TestTheCacheHoldsPodsWithoutWhatKerfNeverReads: the leader's cache keeps
// no managed fields (of pods, ReplicaSets, Deployments) and of a pod none
// of its volumes, environment, probes or scheduling constraints, but all
// that Kerf reads; and a resize written from the stripped cached pod, as
// the in-place apply writes it, changes only the resources: the stored
// pod keeps what the cache dropped.
func TestTheCacheHoldsPodsWithoutWhatKerfNeverReads(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	app := &dep.Spec.Template.Spec.Containers[0]
	app.Env = []corev1.EnvVar{{Name: "MODE", Value: "serve"}}
	app.Command = []string{"/kerf-workload"}
	app.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	app.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	dep.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	require.NoError(t, c.Create(ctx, dep))
	pod := kubetest.RunningPod(t, c, dep)
	// A ReplicaSet's pods have a generate name, and some a finalizer. A
	// resize carries the metadata of the pod it was made from, and the
	// apiserver restores neither from the stored pod.
	require.NoError(t, c.Patch(ctx, pod, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"generateName":"web-h1-","finalizers":["kerf.dev/test-hold"]}}`))))
	t.Cleanup(func() {
		_ = c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	var live corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &live))
	require.NotEmpty(t, live.ManagedFields, "the apiserver keeps managed fields (else this test checks nothing)")
	require.Equal(t, "web-h1-", live.GenerateName)
	require.Equal(t, []string{"kerf.dev/test-hold"}, live.Finalizers)

	l := leadertest.StartReplica(t, ns, "a", cluster.Config{})
	cache := l.Manager().GetCache()
	var cached corev1.Pod
	require.Eventually(t, func() bool {
		return cache.Get(ctx, client.ObjectKeyFromObject(pod), &cached) == nil
	}, 30*time.Second, 50*time.Millisecond, "the pod never reached the leader's cache")

	assert.Empty(t, cached.ManagedFields, "the cached pod's managed fields")
	cc := cached.Spec.Containers[0]
	assert.Nil(t, cc.Env, "env")
	assert.Nil(t, cc.Command, "command")
	assert.Nil(t, cc.VolumeMounts, "volume mounts")
	assert.Nil(t, cc.ReadinessProbe, "readiness probe")
	assert.Nil(t, cached.Spec.Volumes, "volumes")
	assert.Nil(t, cached.Spec.Tolerations, "tolerations")
	// What Kerf reads is all there.
	assert.Equal(t, live.Labels, cached.Labels)
	assert.Equal(t, live.OwnerReferences, cached.OwnerReferences)
	assert.Equal(t, live.Spec.NodeName, cached.Spec.NodeName)
	assert.Equal(t, "app", cc.Name)
	assert.Equal(t, "500m", cc.Resources.Requests.Cpu().String())
	assert.Equal(t, live.Spec.Containers[0].ResizePolicy, cc.ResizePolicy)
	assert.Equal(t, live.Status, cached.Status)

	for _, obj := range []client.Object{&appsv1.ReplicaSet{}, &appsv1.Deployment{}} {
		key := client.ObjectKey{Namespace: ns, Name: "web-h1"}
		if _, ok := obj.(*appsv1.Deployment); ok {
			key.Name = "web"
		}
		require.Eventually(t, func() bool { return cache.Get(ctx, key, obj) == nil }, 30*time.Second, 50*time.Millisecond)
		assert.Empty(t, obj.GetManagedFields(), "the cached %T's managed fields", obj)
	}
	// Of the templates, their digest and what Kerf reads of them; the
	// stored objects keep theirs whole, and no digest annotation.
	var cachedDep, liveDep appsv1.Deployment
	require.NoError(t, cache.Get(ctx, client.ObjectKeyFromObject(dep), &cachedDep))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dep), &liveDep))
	var cachedRS, liveRS appsv1.ReplicaSet
	require.NoError(t, cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-h1"}, &cachedRS))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-h1"}, &liveRS))
	ct := cachedDep.Spec.Template
	assert.Nil(t, ct.Spec.Containers[0].Env, "the cached template's env")
	assert.Empty(t, ct.Spec.Containers[0].Image, "its image")
	assert.Nil(t, ct.Spec.Volumes, "its volumes")
	assert.Nil(t, ct.Spec.Tolerations, "its tolerations")
	assert.Nil(t, ct.Labels, "its labels")
	assert.Equal(t, "app", ct.Spec.Containers[0].Name)
	assert.Equal(t, liveDep.Spec.Template.Spec.Containers[0].Resources, ct.Spec.Containers[0].Resources, "its resources")
	assert.Equal(t, liveDep.Spec.Template.Spec.Containers[0].ResizePolicy, ct.Spec.Containers[0].ResizePolicy, "its resize policy")
	assert.Equal(t, workload.TemplateDigest(&liveDep.Spec.Template), ct.Annotations[workload.TemplateDigestAnnotation], "the whole template's digest")
	assert.Equal(t, ct.Annotations[workload.TemplateDigestAnnotation], cachedRS.Spec.Template.Annotations[workload.TemplateDigestAnnotation],
		"the ReplicaSet's template is the Deployment's but for pod-template-hash")
	assert.Empty(t, cachedRS.Spec.Template.Spec.Containers, "nothing but the digest of a ReplicaSet's template")
	assert.Equal(t, liveDep.Spec.Replicas, cachedDep.Spec.Replicas)
	assert.Equal(t, liveDep.Spec.Selector, cachedDep.Spec.Selector)
	assert.Equal(t, liveDep.Spec.Strategy, cachedDep.Spec.Strategy)
	assert.Equal(t, liveRS.Labels, cachedRS.Labels)
	assert.Equal(t, liveRS.Spec.Selector, cachedRS.Spec.Selector)
	assert.NotContains(t, liveDep.Spec.Template.Annotations, workload.TemplateDigestAnnotation, "the stored Deployment has no digest")
	assert.Equal(t, dep.Spec.Template.Spec.Containers[0].Env, liveDep.Spec.Template.Spec.Containers[0].Env, "and keeps its env")
	// The current ReplicaSet and its running pods, read from the cache.
	w, err := workload.From(&cachedDep)
	require.NoError(t, err)
	running, err := workload.RunningPods(ctx, l.Manager().GetClient(), w)
	require.NoError(t, err)
	require.Len(t, running, 1, "the pod of the current ReplicaSet, found by the digests")
	assert.Equal(t, pod.Name, running[0].Name)

	// The in-place apply's write: a resize of the cached pod.
	cs, err := kubernetes.NewForConfig(cp.Config)
	require.NoError(t, err)
	desired := cached.DeepCopy()
	desired.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
	desired.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("250m")
	_, err = cs.CoreV1().Pods(ns).UpdateResize(ctx, pod.Name, desired, metav1.UpdateOptions{})
	require.NoError(t, err, "resize from the cached pod")
	var after corev1.Pod
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &after))
	assert.Equal(t, "250m", after.Spec.Containers[0].Resources.Requests.Cpu().String(), "resized")
	ac := after.Spec.Containers[0]
	assert.Equal(t, live.Spec.Containers[0].Env, ac.Env, "the stored pod keeps its env")
	assert.Equal(t, live.Spec.Containers[0].VolumeMounts, ac.VolumeMounts, "and its mounts")
	assert.Equal(t, live.Spec.Containers[0].ReadinessProbe, ac.ReadinessProbe, "and its probe")
	assert.Equal(t, live.Spec.Volumes, after.Spec.Volumes, "and its volumes")
	assert.Equal(t, live.Spec.Tolerations, after.Spec.Tolerations, "and its tolerations")
	assert.NotEmpty(t, after.ManagedFields, "and its managed fields")
	assert.Equal(t, live.GenerateName, after.GenerateName, "and its generate name")
	assert.Equal(t, live.Finalizers, after.Finalizers, "and its finalizers")
}
