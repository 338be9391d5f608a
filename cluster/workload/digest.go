package workload

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"math/big"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TemplateDigestAnnotation is the annotation the leader's cache puts on the
// pod template of each workload and ReplicaSet it keeps. It is on the
// cached copy only, never written to the apiserver.
//
// Its value is the template's TemplateDigest, computed from the whole
// template before the cache strips it down to what Kerf reads
// (cluster/cachestore/transform.go). currentReplicaSet compares the
// digests of two templates that carry it in place of the templates.
const TemplateDigestAnnotation = "kerf.dev/cached-template-digest"

var (
	quantityType = reflect.TypeFor[resource.Quantity]()
	timeType     = reflect.TypeFor[metav1.Time]()
	microType    = reflect.TypeFor[metav1.MicroTime]()
)

// TemplateDigest returns a digest of a pod template, equal for two
// templates exactly when the deployment controller's EqualIgnoreHash holds
// between them.
//   - That is apiequality.Semantic.DeepEqual once the pod-template-hash
//     label is removed from both.
//   - Quantities compare by value, times by instant, and a nil slice or
//     map equals an empty one.
//   - A template that already carries TemplateDigestAnnotation returns it.
func TemplateDigest(t *corev1.PodTemplateSpec) string {
	if d, ok := t.Annotations[TemplateDigestAnnotation]; ok {
		return d
	}
	sum := TemplateSum(t)
	return hex.EncodeToString(sum[:])
}

// TemplateSum is TemplateDigest as the bytes it is the hex of, which
// the leader's cache keeps. A template that carries TemplateDigestAnnotation
// returns its value's bytes when that is such a digest.
func TemplateSum(t *corev1.PodTemplateSpec) [sha256.Size]byte {
	var sum [sha256.Size]byte
	if d, ok := t.Annotations[TemplateDigestAnnotation]; ok && hex.DecodedLen(len(d)) == len(sum) {
		if _, err := hex.Decode(sum[:], []byte(d)); err == nil {
			return sum
		}
	}
	labels := t.Labels
	if _, ok := labels[appsv1.DefaultDeploymentUniqueLabelKey]; ok {
		labels = make(map[string]string, len(t.Labels))
		for k, v := range t.Labels {
			if k != appsv1.DefaultDeploymentUniqueLabelKey {
				labels[k] = v
			}
		}
	}
	c := *t // shallow: only Labels is replaced, nothing is written through it
	c.Labels = labels
	h := sha256.New()
	d := digester{h: h}
	d.value(reflect.ValueOf(&c).Elem())
	h.Sum(sum[:0])
	return sum
}

// digester writes a value to a hash in a canonical form. Every variable
// length part is prefixed by its length, so distinct values never write
// the same bytes.
type digester struct {
	h   hash.Hash
	buf [8]byte
}

func (d *digester) uint(v uint64) {
	binary.BigEndian.PutUint64(d.buf[:], v)
	d.h.Write(d.buf[:])
}

func (d *digester) string(s string) {
	d.uint(uint64(len(s)))
	d.h.Write([]byte(s))
}

func (d *digester) value(v reflect.Value) {
	switch v.Type() {
	case quantityType:
		q := v.Interface().(resource.Quantity)
		d.string(canonicalQuantity(&q))
		return
	case timeType:
		d.string(v.Interface().(metav1.Time).UTC().Format(time.RFC3339Nano))
		return
	case microType:
		d.string(v.Interface().(metav1.MicroTime).UTC().Format(time.RFC3339Nano))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			d.uint(1)
		} else {
			d.uint(0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.uint(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		d.uint(v.Uint())
	case reflect.Float32, reflect.Float64:
		d.uint(math.Float64bits(v.Float()))
	case reflect.String:
		d.string(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			d.uint(0)
			return
		}
		d.uint(1)
		if v.Kind() == reflect.Interface {
			d.string(v.Elem().Type().String())
		}
		d.value(v.Elem())
	case reflect.Slice, reflect.Array:
		d.uint(uint64(v.Len())) // a nil slice writes what an empty one does
		for i := range v.Len() {
			d.value(v.Index(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		d.uint(uint64(len(keys)))
		for _, k := range keys {
			d.value(k)
			d.value(v.MapIndex(k))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			d.value(v.Field(i))
		}
	default:
		// Funcs, channels: none in a pod template; written by kind alone.
		d.string(v.Kind().String())
	}
}

// canonicalQuantity is the exact value of q in a form that does not depend
// on how it was written. It is the decimal mantissa without trailing zeros
// and its exponent, so 1Gi and 1073741824 are the same, as are 1 and
// 1000m.
func canonicalQuantity(q *resource.Quantity) string {
	c := q.DeepCopy() // AsDec converts in place: never on the shared value
	dec := c.AsDec()
	unscaled := new(big.Int).Set(dec.UnscaledBig())
	scale := int64(dec.Scale())
	if unscaled.Sign() == 0 {
		return "0"
	}
	ten, mod := big.NewInt(10), new(big.Int)
	for {
		quo, m := new(big.Int).QuoRem(unscaled, ten, mod)
		if m.Sign() != 0 {
			break
		}
		unscaled, scale = quo, scale-1
	}
	return fmt.Sprintf("%se%d", unscaled.String(), -scale)
}
