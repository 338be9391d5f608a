package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// ensureFinalizer adds the hub-delivery finalizer, as soon as the
// recommendation is seen, before it has actions to lose.
func (f *Forwarder) ensureFinalizer(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) error {
	if controllerutil.ContainsFinalizer(rsr, Finalizer) {
		return nil
	}
	// A new slice: rsr may be the cache's own object.
	return f.patchFinalizers(ctx, rsr, append(slices.Clip(rsr.Finalizers), Finalizer))
}

// removeFinalizer removes the hub-delivery finalizer and forgets the
// recommendation's cursor.
func (f *Forwarder) removeFinalizer(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation) error {
	var keep []string
	for _, fin := range rsr.Finalizers {
		if fin != Finalizer {
			keep = append(keep, fin)
		}
	}
	if err := f.patchFinalizers(ctx, rsr, keep); err != nil {
		return err
	}
	if _, ok := f.cursors[rsr.UID]; ok {
		delete(f.cursors, rsr.UID)
		f.dirty = true
	}
	return nil
}

// patchFinalizers sets metadata.finalizers with a merge patch that carries
// the resourceVersion, so a finalizer another controller added meanwhile is
// not lost (the patch conflicts and the next pass retries).
func (f *Forwarder) patchFinalizers(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rsr.ResourceVersion, "finalizers": finalizers}})
	if err != nil {
		return fmt.Errorf("encode the finalizers patch of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	err = f.client.Patch(ctx, rsr.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch finalizers of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	return nil
}

// loadCursors reads CursorConfigMap (none yet: every cursor is 0).
func (f *Forwarder) loadCursors(ctx context.Context) error {
	var cm corev1.ConfigMap
	err := f.api.Get(ctx, client.ObjectKey{Namespace: f.cfg.Namespace, Name: CursorConfigMap}, &cm)
	cursors := map[types.UID]int64{}
	switch {
	case apierrors.IsNotFound(err):
		f.cm = nil
	case err != nil:
		return fmt.Errorf("read the hub cursors %s/%s: %w", f.cfg.Namespace, CursorConfigMap, err)
	default:
		for uid, v := range cm.Data {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				f.log.Warn("ignoring a bad hub cursor", "configMap", f.cfg.Namespace+"/"+CursorConfigMap, "uid", uid, "value", v)
				continue
			}
			cursors[types.UID(uid)] = n
		}
		f.cm = &cm
	}
	// Cursors only move forward: what this process advanced since the
	// last read stays (another replica's write may be older).
	for uid, n := range f.cursors {
		if cursors[uid] < n {
			cursors[uid] = n
		}
	}
	f.cursors = cursors
	return nil
}

// saveCursors writes the cursors to CursorConfigMap when they changed. A
// conflict (another replica wrote it) reads it again and merges; the write
// is retried at the next pass. A cursor that is not saved only makes the
// next leader resend what the hub already has, which it acknowledges as
// duplicates.
func (f *Forwarder) saveCursors(ctx context.Context) error {
	if !f.dirty {
		return nil
	}
	data := make(map[string]string, len(f.cursors))
	for uid, n := range f.cursors {
		data[string(uid)] = strconv.FormatInt(n, 10)
	}
	var err error
	if f.cm == nil {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.cfg.Namespace, Name: CursorConfigMap,
			Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "leader"}}, Data: data}
		if err = f.client.Create(ctx, cm); err == nil {
			f.cm = cm
		}
	} else {
		cm := f.cm.DeepCopy()
		cm.Data = data
		if err = f.client.Update(ctx, cm); err == nil {
			f.cm = cm
		}
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		if lerr := f.loadCursors(ctx); lerr != nil {
			return errors.Join(err, lerr)
		}
	}
	if err != nil {
		return fmt.Errorf("save the hub cursors %s/%s: %w", f.cfg.Namespace, CursorConfigMap, err)
	}
	f.dirty = false
	return nil
}
