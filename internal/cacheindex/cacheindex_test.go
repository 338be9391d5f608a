package cacheindex

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// byApp is the test's index value: a pod's "app" label.
func byApp(o client.Object) []string { return []string{o.GetLabels()["app"]} }

// byUID is a pod's UID, as the leader's stream looks pods up.
func byUID(o client.Object) []string { return []string{string(o.GetUID())} }

// TestListsFindTheIndexedObjects indexes pods in two namespaces on the
// real apiserver, in a cache of all namespaces and in one of the two
// namespaces (as the leader's --watch-namespaces makes it): a Namespaced
// index answers controller-runtime's lists in one namespace, a ClusterWide
// one its lists across all, each through client.MatchingFields as
// controller-runtime's own indexes do; and each holds one key per pod
// where controller-runtime's IndexField holds two.
func TestListsFindTheIndexedObjects(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	run := controlplane.UniqueName("index")
	var pods []*corev1.Pod
	for _, ns := range []string{run + "-a", run + "-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		for _, app := range []string{"web", "db"} {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app, Labels: map[string]string{"app": app, "run": run}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
			require.NoError(t, cp.Client.Create(ctx, p))
			pods = append(pods, p)
		}
	}
	ofRun := labels.SelectorFromSet(labels.Set{"run": run})
	caches := map[string]cache.Options{
		"all namespaces": {ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: ofRun}}},
		"two namespaces": {DefaultNamespaces: map[string]cache.Config{pods[0].Namespace: {}, pods[2].Namespace: {}}},
	}
	for name, opts := range caches {
		t.Run(name, func(t *testing.T) {
			opts.Scheme = kube.Scheme
			c, err := cache.New(cp.Config, opts)
			require.NoError(t, err)
			require.NoError(t, New(c, Namespaced).IndexField(ctx, &corev1.Pod{}, "app", byApp))
			require.NoError(t, New(c, ClusterWide).IndexField(ctx, &corev1.Pod{}, "uid", byUID))
			require.NoError(t, c.IndexField(ctx, &corev1.Pod{}, "uid-both", byUID), "controller-runtime's own, to compare")
			cacheCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _ = c.Start(cacheCtx) }()
			syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
			defer syncCancel()
			require.True(t, c.WaitForCacheSync(syncCtx))

			names := func(opts ...client.ListOption) []string {
				var list corev1.PodList
				require.NoError(t, c.List(ctx, &list, opts...))
				var out []string
				for _, p := range list.Items {
					out = append(out, p.Namespace+"/"+p.Name)
				}
				return out
			}
			require.Equal(t, []string{pods[0].Namespace + "/web"}, names(client.InNamespace(pods[0].Namespace), client.MatchingFields{"app": "web"}))
			require.Equal(t, []string{pods[3].Namespace + "/db"}, names(client.InNamespace(pods[3].Namespace), client.MatchingFields{"app": "db"}))
			require.Empty(t, names(client.MatchingFields{"app": "web"}), "a Namespaced index answers no list across namespaces")
			for _, p := range pods {
				require.Equal(t, []string{p.Namespace + "/" + p.Name}, names(client.MatchingFields{"uid": string(p.UID)}))
				require.Empty(t, names(client.InNamespace(p.Namespace), client.MatchingFields{"uid": string(p.UID)}),
					"a ClusterWide index answers no list in one namespace")
			}

			inf, err := c.GetInformer(ctx, &corev1.Pod{})
			require.NoError(t, err)
			si, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
			if !ok {
				// A cache of several namespaces has an informer (and
				// indexer) per namespace.
				_, err := Lookup(inf, ClusterWide, "uid", "", string(pods[0].UID))
				require.ErrorIs(t, err, ErrNoIndexer)
				return
			}
			for _, p := range pods {
				objs, err := Lookup(inf, ClusterWide, "uid", "", string(p.UID))
				require.NoError(t, err)
				require.Len(t, objs, 1, "Lookup finds the pod by UID")
				got, ok := objs[0].(*corev1.Pod)
				require.True(t, ok)
				stored, exists, err := si.GetIndexer().GetByKey(p.Namespace + "/" + p.Name)
				require.NoError(t, err)
				require.True(t, exists)
				require.Same(t, stored, got, "the informer's own object, not a copy")
			}
			objs, err := Lookup(inf, Namespaced, "app", pods[0].Namespace, "web")
			require.NoError(t, err)
			require.Len(t, objs, 1, "a Namespaced index looked up in its namespace")
			require.Equal(t, pods[0].UID, objs[0].(*corev1.Pod).UID)
			keys := func(field string) int { return len(si.GetIndexer().ListIndexFuncValues(fieldIndexPrefix + field)) }
			require.Equal(t, 4, keys("app"), "web and db in each namespace")
			require.Equal(t, 4, keys("uid"))
			require.Equal(t, 8, keys("uid-both"), "controller-runtime's IndexField keys each pod twice")
		})
	}
}
