package cachestore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// viewer is a stored object, in a form of its own, that can give the API
// type its readers ask for, sharing its fields. The form is a cache
// transform's, smaller than the API type. A read with
// client.UnsafeDisableDeepCopy, one that only reads, gets the view from a
// Cache. It costs the type's structs alone, where DeepCopyObject must
// copy everything.
type viewer interface {
	View() runtime.Object
	// ViewInto writes the view into dst, an object of the API type (a
	// list's item, a Get's object), allocating no struct of its own;
	// false, writing nothing, when dst is of another type.
	ViewInto(dst runtime.Object) bool
}

// storesViews declares the kinds whose informers store viewers, which the
// cache's transform makes. A Get or List of them with
// client.UnsafeDisableDeepCopy gets views of the informer's own objects.
// Where the Cache cannot read those, it gets copies: the wrapped cache
// would hand out the stored form, which is not the type asked for. A
// cache of several namespaces, with an informer per namespace, is such a
// place.
func (c *Cache) storesViews(objs ...client.Object) error {
	return c.declare(true, objs)
}

// answersMeta declares kinds whose metadata Gets read their typed
// informers (getMeta), as for those storesViews declared. Their
// informers store the API type.
func (c *Cache) answersMeta(objs ...client.Object) error {
	return c.declare(false, objs)
}

// declare adds objs's kinds to c.metas and, with views, to c.views.
func (c *Cache) declare(views bool, objs []client.Object) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, c.scheme)
		if err != nil {
			return fmt.Errorf("views of %T: %w", obj, err)
		}
		if views {
			c.views[gvk.GroupKind()] = obj
		}
		c.metas[gvk.GroupKind()] = obj
	}
	return nil
}

// viewed returns obj's kind (of its items for a list) and, when it is
// one storesViews declared, the object declared for it; else nil.
func (c *Cache) viewed(obj runtime.Object) (schema.GroupVersionKind, client.Object) {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return gvk, nil
	}
	if _, isList := obj.(client.ObjectList); isList {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return gvk, c.views[gvk.GroupKind()]
}

// view is what a read that only reads gets of a stored object: its view,
// or the object itself.
func view(o client.Object) runtime.Object {
	if v, ok := o.(viewer); ok {
		return v.View()
	}
	return o
}

// unsafeGet reports whether opts ask for no copy.
func unsafeGet(opts []client.GetOption) bool {
	var o client.GetOptions
	o.ApplyOptions(opts)
	return o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy
}

// Get implements client.Reader, giving views of the kinds storesViews
// declared. With client.UnsafeDisableDeepCopy, such an object is the view
// of the informer's own, or a copy where it has no indexer of its own.
// Every other Get is the wrapped cache's.
func (c *Cache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if pm, ok := obj.(*metav1.PartialObjectMetadata); ok {
		if handled, err := c.getMeta(ctx, key, pm, unsafeGet(opts)); handled {
			return err
		}
	}
	if !unsafeGet(opts) {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	gvk, viewed := c.viewed(obj)
	if viewed == nil {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	informer, err := c.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	}
	stored, ok, err := Stored(informer, key.Namespace, key.Name)
	if errors.Is(err, ErrNoIndexer) {
		return c.Cache.Get(ctx, key, obj) // a copy
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	}
	if !ok {
		// As controller-runtime's cache reader says it.
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
	}
	if v, ok := stored.(viewer); ok && v.ViewInto(obj) {
		return nil
	}
	out, got := reflect.ValueOf(obj), reflect.ValueOf(view(stored))
	if !got.Type().AssignableTo(out.Type()) {
		return fmt.Errorf("cache had type %s, but %s was asked for", got.Type(), out.Type())
	}
	out.Elem().Set(got.Elem())
	return nil
}

// getMeta answers a Get of an object's metadata from its kind's typed
// informer, for a kind storesViews or answersMeta declared. No metadata
// informer is started beside it, as controller-runtime's cache would do
// (a second store of every object's metadata). With share, pm shares the
// stored object's maps and slices, only to be read; else it holds a
// copy. handled is false for a kind not declared.
func (c *Cache) getMeta(ctx context.Context, key client.ObjectKey, pm *metav1.PartialObjectMetadata, share bool) (handled bool, err error) {
	gvk := pm.GroupVersionKind()
	c.mu.RLock()
	viewed := c.metas[gvk.GroupKind()]
	c.mu.RUnlock()
	if viewed == nil {
		return false, nil
	}
	informer, err := c.GetInformer(ctx, viewed)
	if err != nil {
		return true, fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	}
	stored, ok, err := Stored(informer, key.Namespace, key.Name)
	if errors.Is(err, ErrNoIndexer) {
		// A copy of the whole object, from the wrapped cache.
		obj, ok := viewed.DeepCopyObject().(client.Object)
		if !ok {
			return true, fmt.Errorf("get %s %s: %T is not an object", gvk.Kind, key, viewed)
		}
		if err := c.Cache.Get(ctx, key, obj); err != nil {
			return true, err
		}
		stored, share = obj, true // the copy is pm's own
	} else if err != nil {
		return true, fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	} else if !ok {
		return true, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, key.Name)
	}
	var m metav1.ObjectMeta
	switch o := stored.(type) {
	case interface{ view() metav1.ObjectMeta }:
		m = o.view()
	case metav1.ObjectMetaAccessor:
		om, ok := o.GetObjectMeta().(*metav1.ObjectMeta)
		if !ok {
			return true, fmt.Errorf("get %s %s: %T holds no metav1.ObjectMeta", gvk.Kind, key, stored)
		}
		m = *om
	default:
		return true, fmt.Errorf("get %s %s: %T holds no metav1.ObjectMeta", gvk.Kind, key, stored)
	}
	if !share {
		m = *m.DeepCopy()
	}
	m.ManagedFields = nil
	*pm = metav1.PartialObjectMetadata{TypeMeta: pm.TypeMeta, ObjectMeta: m} // the kind asked for
	return true, nil
}

// listViews answers a list of a kind storesViews declared, obj being its
// declared object, with client.UnsafeDisableDeepCopy and no field
// selector. It gives the views of the informer's own objects of the
// namespace, or of all, that the label selector selects. handled is false
// where it cannot, and the caller lists copies: with a limit, a continue,
// or an informer without an indexer of its own.
func (c *Cache) listViews(ctx context.Context, list client.ObjectList, gvk schema.GroupVersionKind, obj client.Object, lo client.ListOptions) (handled bool, err error) {
	if lo.Limit > 0 || lo.Continue != "" {
		return false, nil
	}
	informer, err := c.GetInformer(ctx, obj)
	if err != nil {
		return true, fmt.Errorf("list %s: %w", gvk.Kind, err)
	}
	indexer, err := indexerOf(informer)
	if err != nil {
		return false, nil
	}
	var stored []any
	if lo.Namespace != "" {
		if stored, err = indexer.ByIndex(toolscache.NamespaceIndex, lo.Namespace); err != nil {
			return true, fmt.Errorf("list %s in %s: %w", gvk.Kind, lo.Namespace, err)
		}
	} else {
		stored = indexer.List()
	}
	out := make([]client.Object, 0, len(stored))
	for _, item := range stored {
		o, ok := item.(client.Object)
		if !ok {
			return true, fmt.Errorf("cache contained %T, which is not an Object", item)
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		out = append(out, o)
	}
	if err := setViews(list, out); err != nil {
		return true, fmt.Errorf("list %s: %w", gvk.Kind, err)
	}
	return true, nil
}

// setViews sets list's items to the views of objs. Where the items are
// structs, each view is written into its item (viewer.ViewInto), so that
// it costs no struct beside its item; else apimeta.SetList sets them.
// Struct items are written in the room the list's items already have,
// when it is enough, and the room past them is cleared. So a caller that
// lists into the same items again (workload.Scratch) allocates none.
func setViews(list client.ObjectList, objs []client.Object) error {
	ptr, err := apimeta.GetItemsPtr(list)
	if err != nil {
		return err
	}
	items := reflect.ValueOf(ptr).Elem()
	if items.Kind() != reflect.Slice || items.Type().Elem().Kind() != reflect.Struct {
		views := make([]runtime.Object, len(objs))
		for i, o := range objs {
			views[i] = view(o)
		}
		return apimeta.SetList(list, views)
	}
	var slice reflect.Value
	if n := len(objs); items.Cap() > 0 && items.Cap() >= n {
		room := items.Slice(0, items.Cap())
		for i := n; i < room.Len(); i++ {
			room.Index(i).SetZero()
		}
		slice = room.Slice(0, n)
	} else {
		slice = reflect.MakeSlice(items.Type(), n, n)
	}
	for i, o := range objs {
		dst := slice.Index(i)
		if v, ok := o.(viewer); ok {
			if item, ok := dst.Addr().Interface().(runtime.Object); ok && v.ViewInto(item) {
				continue
			}
		}
		got := reflect.ValueOf(view(o))
		if got.Kind() != reflect.Pointer || !got.Elem().Type().AssignableTo(dst.Type()) {
			return fmt.Errorf("cache had type %s, but a list of %s was asked for", got.Type(), dst.Type())
		}
		dst.Set(got.Elem())
	}
	items.Set(slice)
	return nil
}
