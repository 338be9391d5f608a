package cachestore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// startSynced starts c until the test ends and waits, at most 30 s, for
// its informers to sync.
func startSynced(t *testing.T, ctx context.Context, c *Cache) {
	t.Helper()
	cacheCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() { _ = c.Start(cacheCtx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	require.True(t, c.WaitForCacheSync(syncCtx))
}

// byApp is the test's index value: a pod's "app" label.
func byApp(o client.Object) []string { return []string{o.GetLabels()["app"]} }

// byUID is a pod's UID, as the leader's stream looks pods up.
func byUID(o client.Object) []string { return []string{string(o.GetUID())} }

// TestListsFindTheIndexedObjects indexes pods in two namespaces on the
// real apiserver, in a cache of all namespaces and in one of the two
// namespaces (as the leader's --watch-namespaces makes it), two buckets
// an index so that pods share them: a Namespaced index answers
// controller-runtime's lists in one namespace, a ClusterWide one its lists
// across all, each through client.MatchingFields as controller-runtime's
// own indexes do and each exactly (a bucket's other pods are not listed);
// and each holds at most its buckets' keys where controller-runtime's
// IndexField holds two a pod.
func TestListsFindTheIndexedObjects(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	run := controlplane.UniqueName("index")
	var pods []*corev1.Pod
	apps := []string{"web", "db", "cache", "queue"}
	for _, ns := range []string{run + "-a", run + "-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		for _, app := range apps {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app, Labels: map[string]string{"app": app, "run": run}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
			require.NoError(t, cp.Client.Create(ctx, p))
			pods = append(pods, p)
		}
	}
	ofRun := labels.SelectorFromSet(labels.Set{"run": run})
	caches := map[string]cache.Options{
		"all namespaces": {ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: ofRun}}},
		"two namespaces": {DefaultNamespaces: map[string]cache.Config{pods[0].Namespace: {}, pods[len(apps)].Namespace: {}}},
	}
	const buckets = 2
	for name, opts := range caches {
		t.Run(name, func(t *testing.T) {
			opts.Scheme = kube.Scheme
			inner, err := cache.New(cp.Config, opts)
			require.NoError(t, err)
			c := wrap(inner, kube.Scheme)
			require.NoError(t, c.Indexer(Namespaced).withBuckets(buckets).IndexField(ctx, &corev1.Pod{}, "app", byApp))
			require.NoError(t, c.Indexer(ClusterWide).withBuckets(buckets).IndexField(ctx, &corev1.Pod{}, "uid", byUID))
			require.NoError(t, c.IndexField(ctx, &corev1.Pod{}, "uid-both", byUID), "controller-runtime's own, to compare")
			startSynced(t, ctx, c)

			names := func(opts ...client.ListOption) []string {
				var list corev1.PodList
				require.NoError(t, c.List(ctx, &list, opts...))
				var out []string
				for _, p := range list.Items {
					out = append(out, p.Namespace+"/"+p.Name)
				}
				return out
			}
			for _, p := range pods {
				app := p.Labels["app"]
				require.Equal(t, []string{p.Namespace + "/" + app}, names(client.InNamespace(p.Namespace), client.MatchingFields{"app": app}))
				require.Equal(t, []string{p.Namespace + "/" + app}, names(client.InNamespace(p.Namespace), client.MatchingFields{"app": app},
					client.UnsafeDisableDeepCopy), "the informer's own objects, filtered alike")
				require.Empty(t, names(client.InNamespace(p.Namespace), client.MatchingFields{"app": app}, client.MatchingLabels{"app": "other"}),
					"the label selector applies too")
				require.Equal(t, []string{p.Namespace + "/" + p.Name}, names(client.MatchingFields{"uid": string(p.UID)}))
				require.Empty(t, names(client.InNamespace(p.Namespace), client.MatchingFields{"uid": string(p.UID)}),
					"a ClusterWide index answers no list in one namespace")
			}
			require.Empty(t, names(client.MatchingFields{"app": "web"}), "a Namespaced index answers no list across namespaces")
			require.Empty(t, names(client.InNamespace(pods[0].Namespace), client.MatchingFields{"app": "none"}), "a value no pod has")
			require.Len(t, names(client.InNamespace(pods[0].Namespace)), len(apps), "lists without a field are the wrapped cache's")

			inf, err := c.GetInformer(ctx, &corev1.Pod{})
			require.NoError(t, err)
			si, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
			if !ok {
				// A cache of several namespaces has an informer (and
				// indexer) per namespace.
				_, err := c.Lookup(inf, &corev1.Pod{}, "uid", "", string(pods[0].UID))
				require.ErrorIs(t, err, ErrNoIndexer)
				_, _, err = Stored(inf, pods[0].Namespace, pods[0].Name)
				require.ErrorIs(t, err, ErrNoIndexer)
				return
			}
			for _, p := range pods {
				got, ok, err := Stored(inf, p.Namespace, p.Name)
				require.NoError(t, err)
				require.True(t, ok, "Stored finds %s/%s", p.Namespace, p.Name)
				stored, _, err := si.GetIndexer().GetByKey(p.Namespace + "/" + p.Name)
				require.NoError(t, err)
				require.Same(t, stored, got, "the informer's own object, not a copy")
			}
			_, ok, err = Stored(inf, pods[0].Namespace, "none")
			require.NoError(t, err)
			require.False(t, ok, "no such pod")
			for _, p := range pods {
				objs, err := c.Lookup(inf, &corev1.Pod{}, "uid", "", string(p.UID))
				require.NoError(t, err)
				require.Len(t, objs, 1, "Lookup finds the pod by UID, and no other of its bucket")
				got, ok := objs[0].(*corev1.Pod)
				require.True(t, ok)
				stored, exists, err := si.GetIndexer().GetByKey(p.Namespace + "/" + p.Name)
				require.NoError(t, err)
				require.True(t, exists)
				require.Same(t, stored, got, "the informer's own object, not a copy")
			}
			objs, err := c.Lookup(inf, &corev1.Pod{}, "app", pods[0].Namespace, "web")
			require.NoError(t, err)
			require.Len(t, objs, 1, "a Namespaced index looked up in its namespace")
			require.Equal(t, pods[0].UID, objs[0].(*corev1.Pod).UID)
			_, err = c.Lookup(inf, &corev1.Pod{}, "uid-both", "", string(pods[0].UID))
			require.Error(t, err, "only this package's indexes are looked up")
			keys := func(field string) int { return len(si.GetIndexer().ListIndexFuncValues(fieldIndexPrefix + field)) }
			assert.LessOrEqual(t, keys("app"), 2*buckets, "at most two buckets in each namespace")
			assert.LessOrEqual(t, keys("uid"), buckets, "two buckets for the cluster")
			assert.Equal(t, 2*len(pods), keys("uid-both"), "controller-runtime's IndexField keys each pod twice")
		})
	}
}

// TestBucketsHoldLessThanAKeyAPod indexes 35,000 pods in 50 namespaces of
// 700 (the scale benchmark's, docs/performance.md) in a client-go indexer
// as the leader's cache holds them, by UID across the cluster and by
// their ReplicaSet's UID in their namespace: each value's bucket, against
// one key per value (this package's first form), the live heap of the
// indexes alone measured after a GC.
func TestBucketsHoldLessThanAKeyAPod(t *testing.T) {
	const namespaces, perNamespace = 50, 700
	var pods []*corev1.Pod
	for n := range namespaces {
		for i := range perNamespace {
			rs := types.UID(fmt.Sprintf("rs-%03d-%04d-0000-0000-000000000000", n, i*5/7))
			pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Namespace: fmt.Sprintf("scale-%03d", n), Name: fmt.Sprintf("app-%05d-7d9f8b6c5-x2k4q", i),
				UID:             types.UID(fmt.Sprintf("%08x-0000-0000-0000-%012x", n, i)),
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: rs, Controller: ptr.To(true)}},
			}})
		}
	}
	byController := func(o client.Object) []string {
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			return []string{string(ref.UID)}
		}
		return nil
	}
	oneKey := func(scope Scope, extract client.IndexerFunc) toolscache.IndexFunc {
		return func(raw any) ([]string, error) {
			o := raw.(client.Object)
			ns := o.GetNamespace()
			if scope == ClusterWide {
				ns = allNamespaces
			}
			var keys []string
			for _, v := range extract(o) {
				keys = append(keys, ns+"/"+v)
			}
			return keys, nil
		}
	}
	bucketed := func(scope Scope, extract client.IndexerFunc) toolscache.IndexFunc {
		return index{scope: scope, buckets: scope.buckets(), extract: extract}.keys
	}
	held := func(indexFunc func(Scope, client.IndexerFunc) toolscache.IndexFunc) float64 {
		store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
		for _, p := range pods {
			require.NoError(t, store.Add(p))
		}
		before := liveHeap()
		require.NoError(t, store.AddIndexers(toolscache.Indexers{
			"uid":        indexFunc(ClusterWide, byUID),
			"controller": indexFunc(Namespaced, byController),
		}))
		after := liveHeap()
		runtime.KeepAlive(store)
		return float64(after-before) / float64(len(pods))
	}
	one, buckets := held(oneKey), held(bucketed)
	t.Logf("the two indexes of %d pods: %.0f bytes a pod with a key per value, %.0f in buckets (Namespaced %d, ClusterWide %d)",
		len(pods), one, buckets, namespacedBuckets, clusterWideBuckets)
	assert.Less(t, buckets, one/3, "buckets hold less than a third of a key a value")
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
