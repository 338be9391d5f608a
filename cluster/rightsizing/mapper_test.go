package rightsizing

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// cachedMapper returns the leader's signal mapper over a cache of all
// namespaces as the leader's (cachestore.NewCache, its transform and
// indexes; one informer and one indexer a kind), each informer limited to
// ns by a field selector, so that the shared control plane's other
// objects stay out.
// The leader's tests watch their namespace (WatchNamespaces), a cache of
// an informer per namespace, where the mapper reads copies instead.
func cachedMapper(tb testing.TB, ns string) mapper {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	inNS := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.namespace", ns)}
	inner, err := cachestore.NewCache(controlplane.Get(tb).Config, cache.Options{Scheme: kube.Scheme, DefaultTransform: cachestore.Transform,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: inNS, &appsv1.ReplicaSet{}: inNS, &appsv1.Deployment{}: inNS,
			&v1alpha1.RightsizingRecommendation{}: inNS}})
	require.NoError(tb, err)
	ic := inner.(*cachestore.Cache)
	require.NoError(tb, stream.IndexPodsByUID(ctx, ic.Indexer(cachestore.ClusterWide)))
	require.NoError(tb, workload.IndexFields(ctx, ic.Indexer(cachestore.Namespaced)))
	require.NoError(tb, ic.Indexer(cachestore.Namespaced).IndexField(ctx, &v1alpha1.RightsizingRecommendation{}, targetRefIndex, func(o client.Object) []string {
		ref := o.(*v1alpha1.RightsizingRecommendation).Spec.TargetRef
		return []string{targetKey(ref.Kind, ref.Name)}
	}))
	pods, err := ic.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	require.NoError(tb, err)
	replicaSets, err := ic.GetInformer(ctx, &appsv1.ReplicaSet{}, cache.BlockUntilSynced(false))
	require.NoError(tb, err)
	recs, err := ic.GetInformer(ctx, &v1alpha1.RightsizingRecommendation{}, cache.BlockUntilSynced(false))
	require.NoError(tb, err)
	_, err = ic.GetInformer(ctx, &appsv1.Deployment{}, cache.BlockUntilSynced(false))
	require.NoError(tb, err)
	go func() { _ = ic.Start(ctx) }()
	require.True(tb, ic.WaitForCacheSync(ctx))
	return mapper{c: ic, cache: ic, pods: pods, replicaSets: replicaSets, recommendations: recs,
		r: &Reconciler{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
}

// runningWeb creates a namespace holding the Deployment web and its
// running pod (runningPod).
func runningWeb(t *testing.T) (client.Client, string, *corev1.Pod) {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(context.Background(), dep))
	return c, ns, kubetest.RunningPod(t, c, dep)
}

// TestSignalsMapThroughTheCachesOwnReplicaSet: on a cache of all
// namespaces, an agent's signal about a pod maps to the recommendation of
// the pod's Deployment through the cache's own pod and ReplicaSet, read
// without a copy; a pod whose ReplicaSet the cache lacks, or whose owner
// reference names another ReplicaSet of that name (another UID), maps to
// none.
func TestSignalsMapThroughTheCachesOwnReplicaSet(t *testing.T) {
	c, ns, pod := runningWeb(t)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")))
	m := cachedMapper(t, ns)

	signal := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}}
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: "web"}}}
	require.Eventually(t, func() bool { return len(m.signaled(ctx, signal)) == 1 }, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, want, m.signaled(ctx, signal))
	rs := metav1.GetControllerOfNoCopy(pod)
	require.NotNil(t, rs)
	stored, ok, err := cachestore.Stored(m.replicaSets, ns, rs.Name)
	require.NoError(t, err)
	require.True(t, ok, "the mapper reads the informer's own ReplicaSet")
	_, isCopy := stored.(*appsv1.ReplicaSet)
	assert.False(t, isCopy, "in the cache's own form, not an *appsv1.ReplicaSet")

	owned := func(name string, uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: uid, Controller: new(true)}}}}
	}
	assert.Equal(t, want, m.pod(ctx, owned(rs.Name, rs.UID)), "the same owner, from a pod the signal does not name")
	assert.Empty(t, m.pod(ctx, owned("gone", "u")), "a ReplicaSet the cache lacks")
	assert.Empty(t, m.pod(ctx, owned(rs.Name, "another")), "another ReplicaSet of that name")
}

// webDeployment creates a namespace holding the Deployment web, with no
// pod yet.
func webDeployment(b *testing.B) (client.Client, string, *appsv1.Deployment) {
	b.Helper()
	c := controlplane.Get(b).Client
	ns := kubetest.Namespace(b, c)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	if err := c.Create(context.Background(), dep); err != nil {
		b.Fatal(err)
	}
	return c, ns, dep
}

// BenchmarkSignalMapping measures what mapping one agent's signal (a pod
// by UID, 3,500 a second at 35,000 pods) to its recommendation costs on
// the leader's cache of all namespaces: the pod and its ReplicaSet read
// from the cache's own objects.
func BenchmarkSignalMapping(b *testing.B) {
	c, ns, dep := webDeployment(b)
	ctx := context.Background()
	pod := kubetest.AdoptedPod(b, c, dep, "web-1")
	if err := c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")); err != nil {
		b.Fatal(err)
	}
	m := cachedMapper(b, ns)
	signal := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID}}
	deadline := time.Now().Add(30 * time.Second)
	for len(m.signaled(ctx, signal)) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("the signal maps to no recommendation")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(m.signaled(ctx, signal)) != 1 {
			b.Fatal("the signal maps to no recommendation")
		}
	}
}

// TestReadOnlyReadsGetTheCachesViews: through the leader's cache (of all
// namespaces), a workload's pods read with workload.ReadOnly are views
// sharing the cache's own pods (their View), as the usage series read
// them, and the Deployment a view of the cache's; without it, copies.
func TestReadOnlyReadsGetTheCachesViews(t *testing.T) {
	_, ns, pod := runningWeb(t)
	ctx := context.Background()
	m := cachedMapper(t, ns)
	cached, err := client.New(controlplane.Get(t).Config, client.Options{Scheme: kube.Scheme, Cache: &client.CacheOptions{Reader: m.cache}})
	require.NoError(t, err)
	readOnly, copying := workload.Indexed(workload.ReadOnly(cached)), workload.Indexed(cached)

	shared := func(p *corev1.Pod) bool {
		stored, ok, err := cachestore.Stored(m.pods, p.Namespace, p.Name)
		require.NoError(t, err)
		require.True(t, ok)
		return reflect.ValueOf(stored.GetLabels()).UnsafePointer() == reflect.ValueOf(p.Labels).UnsafePointer()
	}
	var pods []corev1.Pod
	require.Eventually(t, func() bool {
		w, err := workload.Get(ctx, readOnly, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"})
		if err != nil {
			return false
		}
		pods, err = workload.Pods(ctx, readOnly, w)
		return err == nil && len(pods) == 1
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, pod.UID, pods[0].UID)
	assert.True(t, shared(&pods[0]), "a read-only read is the cache's pod's view")

	w, err := workload.Get(ctx, copying, ns, v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"})
	require.NoError(t, err)
	pods, err = workload.Pods(ctx, copying, w)
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.False(t, shared(&pods[0]), "any other read is a copy")
	assert.Equal(t, pod.Spec.Containers[0].Resources, pods[0].Spec.Containers[0].Resources)
}

// BenchmarkUsageSeriesPass measures one pass of the usage series over a
// Deployment of three running pods on the leader's cache of all
// namespaces, read as the leader reads it (workload.ReadOnly, Indexed):
// at 25,000 workloads the passes were a quarter of what the leader
// allocated during a wave (docs/performance.md, "The ninth round").
func BenchmarkUsageSeriesPass(b *testing.B) {
	c, ns, dep := webDeployment(b)
	ctx := context.Background()
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		p := kubetest.AdoptedPod(b, c, dep, name)
		p.Status.Phase = corev1.PodRunning
		if err := c.Status().Update(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")); err != nil {
		b.Fatal(err)
	}
	m := cachedMapper(b, ns)
	cached, err := client.New(controlplane.Get(b).Config, client.Options{Scheme: kube.Scheme, Cache: &client.CacheOptions{Reader: m.cache}})
	if err != nil {
		b.Fatal(err)
	}
	u := pages.NewUsageSeries(workload.Indexed(workload.ReadOnly(cached)), signals.New(), pages.UsageSeriesConfig{}, nil, slog.New(slog.DiscardHandler))
	u.Recommendations = cachestore.Recommendations(m.recommendations, cached) // as the leader's
	deadline := time.Now().Add(30 * time.Second)
	for u.Len() != 1 {
		if time.Now().After(deadline) {
			b.Fatalf("the pass made %d series, want 1 (app)", u.Len())
		}
		if err := u.Pass(ctx); err != nil {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := u.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// noRecommendationLists fails every list of recommendations.
type noRecommendationLists struct{ client.Client }

func (c noRecommendationLists) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.RightsizingRecommendationList); ok {
		return fmt.Errorf("a list of recommendations")
	}
	return c.Client.List(ctx, list, opts...)
}

// TestUsageSeriesReadTheInformersOwnRecommendations: given the cache's
// informer of recommendations (as the leader gives it), a pass reads the
// informer's own recommendations and lists none (at 25,000 a list copied
// each one's struct, every pass); without the informer, it lists them.
func TestUsageSeriesReadTheInformersOwnRecommendations(t *testing.T) {
	_, ns, _ := runningWeb(t)
	ctx := context.Background()
	c := controlplane.Get(t).Client
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyInPlace, "250m", "128Mi")))
	m := cachedMapper(t, ns)
	cached, err := client.New(controlplane.Get(t).Config, client.Options{Scheme: kube.Scheme, Cache: &client.CacheOptions{Reader: m.cache}})
	require.NoError(t, err)
	u := pages.NewUsageSeries(workload.Indexed(workload.ReadOnly(noRecommendationLists{cached})), signals.New(), pages.UsageSeriesConfig{}, nil, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, u.Pass(ctx), "a list of recommendations", "without the informer, a pass lists")
	u.Recommendations = cachestore.Recommendations(m.recommendations, noRecommendationLists{cached})
	require.Eventually(t, func() bool {
		require.NoError(t, u.Pass(ctx))
		return u.Len() == 1
	}, 30*time.Second, 50*time.Millisecond, "the web Deployment's container has a series")
	assert.Len(t, u.Usage(ns, v1alpha1.KindDeployment, "web"), 0, "no reading yet")
}
