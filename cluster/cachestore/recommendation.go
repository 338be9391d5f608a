package cachestore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/forward"
)

// A cached recommendation is its decoded object, with what many of them
// hold alike shared (internRecommendation). At scale the recommendations
// were the largest part of the leader's heap at a wave's end
// (docs/leader.md, "Reading from the cache: what each cut saved"). A
// RightsizingRecommendation is a custom resource, decoded from JSON into
// the Go type every reader asks for. So unlike a pod it is kept as that
// type, not as a type of Kerf's own, and what shrinks it is sharing.
//
// What is shared is never written: every read of the cache copies the
// object (DeepCopy allocates new ResourceValues and Quantities), and the
// readers that list without a copy (client.UnsafeDisableDeepCopy) only
// read. A string shared is immutable anyway.

// maxInternedValues bounds the distinct resource values (a CPU and a
// memory amount) interned. A full table starts over, as stringMaps does;
// the objects keep the values they share. Each entry is a key of about
// 20 bytes and a value of a few Quantities: at most a few MB.
const maxInternedValues = 20000

// resourceValues holds one shared *ResourceValues per distinct pair of
// amounts of the cached recommendations. A recommendation holds about
// ten: the requests and limits of its spec, of its change's previous and
// applied values, and of each history action's old and new. Each is two
// Quantities and a struct of its own, nearly all alike across the
// workloads a recommender sized the same.
var resourceValues = &valuesInterner{sharedTable[*v1alpha1.ResourceValues]{max: maxInternedValues}}

// valuesInterner is a bounded table of shared resource values.
type valuesInterner struct {
	sharedTable[*v1alpha1.ResourceValues]
}

// intern returns the shared values equal to v: the same amounts in the
// same formats. It returns v itself when it is the first such, emptying a
// full table first. Its Quantities' String is called here, before any
// sharing. String caches the canonical form in the Quantity, a write that
// must not race with the readers of a shared one.
func (in *valuesInterner) intern(v *v1alpha1.ResourceValues) *v1alpha1.ResourceValues {
	if v == nil {
		return nil
	}
	key := appendQuantityKey(appendQuantityKey(make([]byte, 0, 32), v.CPU), v.Memory)
	return in.share(string(key), v)
}

// appendQuantityKey appends what interning compares of q: its canonical
// form and its format, or "-" when it is not set.
func appendQuantityKey(key []byte, q *resource.Quantity) []byte {
	if q == nil {
		return append(key, '-', ',')
	}
	key = append(key, q.String()...)
	key = append(key, '/')
	key = append(key, q.Format...)
	return append(key, ',')
}

// sharedPointees holds one shared policy reference and one shared time per
// distinct value of the cached recommendations, as resourceValues does
// for their amounts. A recommendation points to a policy reference twice
// (status.policy, status.rollback.policy) and to a few times (when its
// turn started, when it was promoted). Each is an allocation of its own,
// nearly all alike: the workloads one policy governs, the changes made
// in the same second.
var sharedPointees = struct {
	policies sharedTable[*v1alpha1.PolicyReference]
	times    sharedTable[*metav1.Time]
}{
	policies: sharedTable[*v1alpha1.PolicyReference]{max: maxInternedValues},
	times:    sharedTable[*metav1.Time]{max: maxInternedValues},
}

// internPointee returns the shared pointer equal to the *PolicyReference
// or *metav1.Time v; false for another type. It never writes into v's
// pointee, which may be the shared one: a policy reference is shared as
// a copy with its strings interned.
func internPointee(v reflect.Value, own ownStrings) (reflect.Value, bool) {
	switch p := v.Interface().(type) {
	case *v1alpha1.PolicyReference:
		key := string(p.Kind) + "/" + p.Name + "/" + p.Fingerprint
		c := *p
		internValue(reflect.ValueOf(&c).Elem(), own)
		return reflect.ValueOf(sharedPointees.policies.share(key, &c)), true
	case *metav1.Time:
		key := strconv.FormatInt(p.UnixNano(), 10) + "/" + p.Location().String()
		return reflect.ValueOf(sharedPointees.times.share(key, p)), true
	}
	return v, false
}

// internRecommendation shares what a decoded recommendation holds alike
// with others. It shares:
//   - its labels and annotations (stringMaps);
//   - every *ResourceValues (resourceValues), *PolicyReference and
//     *metav1.Time (sharedPointees);
//   - every string (unique.Make). The table holds a string only while
//     some object does, so it needs no bound of its own.
//
// Most of a recommendation's strings are alike across the cache: the
// container, kind, policy and reason names, the policy's fingerprint, the
// messages of the same action. The UIDs, resourceVersions and pod names
// (ownFields) are alike only within it, as a pod's name and UID in each
// of its change's baselines. They are shared within the object, not put
// in unique's table, where each would cost its entry and weak handle
// (TestInterningShrinksTheCachedRecommendations). It walks the object by
// reflection, so a field added to the type is shared too.
func internRecommendation(rsr *v1alpha1.RightsizingRecommendation) {
	dropBasis(&rsr.ObjectMeta)
	internMeta(&rsr.ObjectMeta)
	internValue(reflect.ValueOf(rsr).Elem(), ownStrings{})
}

// dropBasis drops the recommender's basis annotation from a
// recommendation that carries its refusals annotation. That one says in
// short what the leader reads of the basis on every pass. The basis is the
// figures behind the values, about a kilobyte of JSON, each its own
// (TestTheCacheDropsTheBasisItsRefusalsAnnotationSums). What needs them
// reads the object from the apiserver: the reconciler, a new refusal's
// figures; the workload page. A recommendation without the refusals
// annotation, written before it, keeps its basis.
//
// It writes a new map: the object's may be one stringMaps shares, when
// the informer hands a stored object to the transform again.
func dropBasis(m *metav1.ObjectMeta) {
	_, summed := m.Annotations[v1alpha1.RecommendationRefusalsAnnotation]
	if _, ok := m.Annotations[v1alpha1.RecommendationBasisAnnotation]; !ok || !summed {
		return
	}
	kept := make(map[string]string, len(m.Annotations)-1)
	for k, v := range m.Annotations {
		if k != v1alpha1.RecommendationBasisAnnotation {
			kept[k] = v
		}
	}
	m.Annotations = kept
}

// ownStrings are the strings of one object shared within it only.
type ownStrings map[string]string

// intern returns the string equal to s met before in the object, else s.
func (o ownStrings) intern(s string) string {
	if t, ok := o[s]; ok {
		return t
	}
	o[s] = s
	return s
}

// ownFields name the string fields whose values are one object's own:
// its UID and resourceVersion, those of what its change touched, and its
// baselines' pods.
var ownFields = map[string]bool{"UID": true, "PodUID": true, "ResourceVersion": true, "Pod": true}

// valuesType is the type of the resource values internValue shares.
var valuesType = reflect.TypeFor[*v1alpha1.ResourceValues]()

// internValue interns the strings and resource values held in v, which is
// settable, those of ownFields within own. Maps are left alone: the labels
// and annotations are interned as whole maps, and the type holds no others
// of any size.
//
// It writes only what changes. The informer may hand an object it stores
// to the transform again, while readers copy it: in an object interned
// before, every string and pointer is already the shared one, and nothing
// is written (TestInterningAStoredRecommendationAgainWritesNothing).
func internValue(v reflect.Value, own ownStrings) {
	switch v.Kind() {
	case reflect.String:
		setString(v, internString(v.String()))
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		if v.Type() == valuesType {
			setPointer(v, reflect.ValueOf(resourceValues.intern(v.Interface().(*v1alpha1.ResourceValues))))
			return
		}
		if shared, ok := internPointee(v, own); ok {
			setPointer(v, shared)
			return
		}
		internValue(v.Elem(), own)
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			f := t.Field(i)
			switch {
			case !f.IsExported():
			case ownFields[f.Name] && f.Type.Kind() == reflect.String:
				if s := v.Field(i).String(); s != "" {
					setString(v.Field(i), own.intern(s))
				}
			default:
				internValue(v.Field(i), own)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			internValue(v.Index(i), own)
		}
	}
}

// setString sets the string v to s unless v holds s's bytes already.
func setString(v reflect.Value, s string) {
	if !sameBytes(v.String(), s) {
		v.SetString(s)
	}
}

// setPointer sets the pointer v to p unless it is p already.
func setPointer(v, p reflect.Value) {
	if v.UnsafePointer() != p.UnsafePointer() {
		v.Set(p)
	}
}

// Recommendations returns what reads every recommendation for the
// leader's periodic passes: the usage series, the hub forwarder, the
// finalizer releaser. It reads informer's own objects, only to be read,
// at the cost of one slice. Where the cache has no indexer of its own, in
// a cache of several namespaces, it lists through c. The items share the
// cache's objects but copy each one's struct (docs/leader.md, "Memory:
// how tight a limit costs what").
func Recommendations(informer cache.Informer, c client.Reader) forward.Recommendations {
	return func(ctx context.Context) ([]*v1alpha1.RightsizingRecommendation, error) {
		stored, err := allStored(informer)
		if errors.Is(err, ErrNoIndexer) {
			return forward.ListRecommendations(ctx, c)
		}
		if err != nil {
			return nil, fmt.Errorf("recommendations: %w", err)
		}
		out := make([]*v1alpha1.RightsizingRecommendation, 0, len(stored))
		for _, o := range stored {
			if rsr, ok := o.(*v1alpha1.RightsizingRecommendation); ok {
				out = append(out, rsr)
			}
		}
		return out, nil
	}
}
