package cachestore

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// storedPod is a pod in a transform's form of its own, as the leader's
// cachedPod: its metadata alone. A copy is a whole *corev1.Pod of its
// own; a view shares the metadata's maps.
type storedPod struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (p *storedPod) DeepCopyObject() runtime.Object {
	out := &corev1.Pod{TypeMeta: p.TypeMeta}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (p *storedPod) View() runtime.Object {
	return &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
}

func (p *storedPod) ViewInto(dst runtime.Object) bool {
	pod, ok := dst.(*corev1.Pod)
	if ok {
		*pod = corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	}
	return ok
}

// TestReadsWithoutCopiesGetViews: in a cache whose transform stores pods
// as viewers, declared by storesViews, a Get or a List (by namespace and
// labels, or by an index) with client.UnsafeDisableDeepCopy gets views
// of the informer's own pods (their labels the stored map) in a cache of
// all namespaces, and copies in a cache of two (an informer per
// namespace); a read without the option gets copies in both. A list of
// views is written in the room its items have.
func TestReadsWithoutCopiesGetViews(t *testing.T) {
	cp := controlplane.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	run := controlplane.UniqueName("views")
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
	store := func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			return &storedPod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}, nil
		}
		return o, nil
	}
	caches := map[string]cache.Options{
		"all namespaces": {ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: ofRun}}},
		"two namespaces": {DefaultNamespaces: map[string]cache.Config{pods[0].Namespace: {}, pods[2].Namespace: {}}},
	}
	for name, opts := range caches {
		t.Run(name, func(t *testing.T) {
			opts.Scheme, opts.DefaultTransform = kube.Scheme, store
			inner, err := cache.New(cp.Config, opts)
			require.NoError(t, err)
			c := wrap(inner, kube.Scheme)
			require.NoError(t, c.storesViews(&corev1.Pod{}))
			require.NoError(t, c.Indexer(Namespaced).IndexField(ctx, &corev1.Pod{}, "app", byApp))
			startSynced(t, ctx, c)
			informer, err := c.GetInformer(ctx, &corev1.Pod{})
			require.NoError(t, err)
			views := name == "all namespaces"

			// shared reports whether p's labels are the stored pod's map.
			shared := func(p *corev1.Pod) bool {
				stored, ok, err := Stored(informer, p.Namespace, p.Name)
				if err != nil || !ok {
					return false
				}
				return reflect.ValueOf(stored.GetLabels()).UnsafePointer() == reflect.ValueOf(p.Labels).UnsafePointer()
			}
			for _, want := range pods {
				var got corev1.Pod
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), &got, client.UnsafeDisableDeepCopy))
				require.Equal(t, want.UID, got.UID)
				assert.Equal(t, views, shared(&got), "Get %s/%s without a copy", want.Namespace, want.Name)
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), &got))
				assert.False(t, shared(&got), "a Get is a copy")

				lists := map[string][]client.ListOption{
					"by namespace and labels": {client.InNamespace(want.Namespace), client.MatchingLabels{"app": want.Labels["app"]}},
					"by an index":             {client.InNamespace(want.Namespace), client.MatchingFields{"app": want.Labels["app"]}},
				}
				for how, opts := range lists {
					var list corev1.PodList
					require.NoError(t, c.List(ctx, &list, append(opts, client.UnsafeDisableDeepCopy)...), how)
					require.Len(t, list.Items, 1, how)
					require.Equal(t, want.UID, list.Items[0].UID, how)
					assert.Equal(t, views, shared(&list.Items[0]), "a list %s without a copy", how)
					require.NoError(t, c.List(ctx, &list, opts...), how)
					require.Len(t, list.Items, 1, how)
					assert.False(t, shared(&list.Items[0]), "a list %s is of copies", how)
				}
			}
			if views {
				// A list whose items have the room is written in it.
				room := make([]corev1.Pod, 3)
				room[2].Name = "stale"
				list := corev1.PodList{Items: room[:0]}
				require.NoError(t, c.List(ctx, &list, client.InNamespace(pods[0].Namespace), client.MatchingFields{"app": "web"},
					client.UnsafeDisableDeepCopy))
				require.Len(t, list.Items, 1)
				assert.Same(t, &room[0], &list.Items[0], "a list whose items have the room is written in it")
				assert.Equal(t, pods[0].UID, room[0].UID)
				assert.Empty(t, room[2].Name, "what was in the room past the items is cleared")
			}
			var none corev1.Pod
			err = c.Get(ctx, client.ObjectKey{Namespace: pods[0].Namespace, Name: "none"}, &none, client.UnsafeDisableDeepCopy)
			assert.True(t, apierrors.IsNotFound(err), "%v", err)
		})
	}
}

// TestAMetadataGetReadsTheTypedInformer: a Get of a
// metav1.PartialObjectMetadata of a kind storesViews (pods, here) or
// answersMeta (ConfigMaps) declared is answered from the kind's typed
// informer, never a metadata informer of its own beside it: the cache
// fails a read no informer was started for, as a metadata Get of an
// undeclared kind (Secrets) shows. Without a copy its labels are the
// stored object's map in a cache of all namespaces; with one, or in a
// cache of two namespaces, they are its own.
func TestAMetadataGetReadsTheTypedInformer(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := t.Context()
	run := controlplane.UniqueName("meta")
	var objs []client.Object
	for _, ns := range []string{run + "-a", run + "-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "conf", Labels: map[string]string{"app": "conf"}}}
		for _, o := range []client.Object{p, cm} {
			require.NoError(t, cp.Client.Create(ctx, o))
			objs = append(objs, o)
		}
	}
	store := func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			return &storedPod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}, nil
		}
		return o, nil
	}
	caches := map[string]cache.Options{
		"all namespaces": {},
		"two namespaces": {DefaultNamespaces: map[string]cache.Config{objs[0].GetNamespace(): {}, objs[2].GetNamespace(): {}}},
	}
	for name, opts := range caches {
		t.Run(name, func(t *testing.T) {
			opts.Scheme, opts.DefaultTransform, opts.ReaderFailOnMissingInformer = kube.Scheme, store, true
			inner, err := cache.New(cp.Config, opts)
			require.NoError(t, err)
			c := wrap(inner, kube.Scheme)
			require.NoError(t, c.storesViews(&corev1.Pod{}))
			require.NoError(t, c.answersMeta(&corev1.ConfigMap{}))
			informers := map[string]cache.Informer{}
			for _, o := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}} {
				informers[fmt.Sprintf("%T", o)], err = c.GetInformer(ctx, o)
				require.NoError(t, err)
			}
			startSynced(t, ctx, c)
			views := name == "all namespaces"

			for _, want := range objs {
				gvk, err := apiutil.GVKForObject(want, kube.Scheme)
				require.NoError(t, err)
				stored, ok, err := Stored(informers[fmt.Sprintf("%T", want)], want.GetNamespace(), want.GetName())
				if views {
					require.NoError(t, err)
					require.True(t, ok)
				}
				shared := func(pm *metav1.PartialObjectMetadata) bool {
					return stored != nil && reflect.ValueOf(stored.GetLabels()).UnsafePointer() == reflect.ValueOf(pm.Labels).UnsafePointer()
				}
				for _, noCopy := range []bool{true, false} {
					pm := &metav1.PartialObjectMetadata{}
					pm.SetGroupVersionKind(gvk)
					var opts []client.GetOption
					if noCopy {
						opts = append(opts, client.UnsafeDisableDeepCopy)
					}
					require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), pm, opts...), "%s %s", gvk.Kind, want.GetName())
					assert.Equal(t, want.GetUID(), pm.UID)
					assert.Equal(t, want.GetLabels(), pm.Labels)
					assert.Equal(t, gvk, pm.GroupVersionKind(), "the kind asked for")
					assert.Equal(t, views && noCopy, shared(pm), "%s %s, without a copy: %v", gvk.Kind, want.GetName(), noCopy)
				}
			}
			missing := &metav1.PartialObjectMetadata{}
			missing.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			err = c.Get(ctx, client.ObjectKey{Namespace: objs[0].GetNamespace(), Name: "none"}, missing, client.UnsafeDisableDeepCopy)
			assert.True(t, apierrors.IsNotFound(err), "a pod that is not there: %v", err)
			secret := &metav1.PartialObjectMetadata{}
			secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
			err = c.Get(ctx, client.ObjectKey{Namespace: objs[0].GetNamespace(), Name: "any"}, secret, client.UnsafeDisableDeepCopy)
			var notCached *cache.ErrResourceNotCached
			assert.ErrorAs(t, err, &notCached, "an undeclared kind is controller-runtime's, which would need an informer of its own")
		})
	}
}
