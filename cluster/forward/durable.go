package forward

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/google/uuid"
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
// the resourceVersion. So a finalizer another controller added meanwhile
// is not lost: the patch conflicts and the next pass retries.
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
		if raw, ok := cm.BinaryData[packedCursorsKey]; ok {
			if err := unpackCursors(raw, cursors); err != nil {
				f.log.Warn("ignoring the rest of the packed hub cursors", "configMap", f.cfg.Namespace+"/"+CursorConfigMap, "err", err)
			}
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
	packed, data := packCursors(f.cursors)
	if size := len(packed) + mapBytes(data); size > maxCursorBytes {
		// Not written: a ConfigMap holds 1 MiB. Nothing is lost (a leader
		// that takes over resends what the hub already has, which it
		// acknowledges as duplicates), but it is said, every pass.
		return fmt.Errorf("save the hub cursors %s/%s: %d recommendations need %d bytes, more than the %d a ConfigMap holds; a new leader will resend their delivered actions (duplicates)",
			f.cfg.Namespace, CursorConfigMap, len(f.cursors), size, maxCursorBytes)
	}
	binary := map[string][]byte{packedCursorsKey: packed}
	var err error
	if f.cm == nil {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.cfg.Namespace, Name: CursorConfigMap,
			Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "leader"}}, Data: data, BinaryData: binary}
		if err = f.client.Create(ctx, cm); err == nil {
			f.cm = cm
		}
	} else {
		cm := f.cm.DeepCopy()
		cm.Data, cm.BinaryData = data, binary
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

// packedCursorsKey is the binaryData key of the packed cursors. For each
// recommendation whose UID is a UUID, as every one the apiserver makes,
// it holds the UID's 16 bytes and the cursor as a uvarint. That is about
// 18 bytes a recommendation, where a data entry of text ("<uid>":
// "<seq>") takes some 45 bytes of the object's JSON. docs/hub.md, "The
// leader's side: forwarding", says how many fit in a ConfigMap each way.
// A UID that is not a UUID stays a data entry.
const packedCursorsKey = "cursors.v1"

// maxCursorBytes is what the cursors may take of a ConfigMap's 1 MiB,
// with room for its metadata.
const maxCursorBytes = 1<<20 - 16<<10

// packCursors packs the cursors (packedCursorsKey), sorted by UID so the
// same cursors pack the same; UIDs that are not UUIDs are returned as
// data entries.
func packCursors(cursors map[types.UID]int64) ([]byte, map[string]string) {
	uids := make([]types.UID, 0, len(cursors))
	for uid := range cursors {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	packed := make([]byte, 0, len(uids)*18)
	var data map[string]string
	for _, uid := range uids {
		id, err := uuid.Parse(string(uid))
		if err != nil || id.String() != string(uid) {
			if data == nil {
				data = map[string]string{}
			}
			data[string(uid)] = strconv.FormatInt(cursors[uid], 10)
			continue
		}
		packed = append(packed, id[:]...)
		packed = binary.AppendUvarint(packed, uint64(cursors[uid]))
	}
	return packed, data
}

// unpackCursors adds the packed cursors of raw to cursors.
func unpackCursors(raw []byte, cursors map[types.UID]int64) error {
	for len(raw) > 0 {
		if len(raw) < 17 {
			return fmt.Errorf("%d bytes left, less than a cursor", len(raw))
		}
		id, err := uuid.FromBytes(raw[:16])
		if err != nil {
			return err
		}
		n, w := binary.Uvarint(raw[16:])
		if w <= 0 || n > math.MaxInt64 {
			return errors.New("a cursor that is not a uvarint")
		}
		cursors[types.UID(id.String())] = int64(n)
		raw = raw[16+w:]
	}
	return nil
}

// mapBytes is the bytes of a ConfigMap's data entries.
func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}
