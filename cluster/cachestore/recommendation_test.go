package cachestore

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/kube"
)

// watchingRecommendations are n recommendations as JSON, each as the
// leader left one in the scale harness (testdata/recommendation-watching.json,
// read from its apiserver: a Rollout change of two pods' memory, applied
// and watched), with its own name, UIDs and resourceVersions.
func watchingRecommendations(t *testing.T, n int) [][]byte {
	t.Helper()
	sample, err := os.ReadFile("testdata/recommendation-watching.json")
	require.NoError(t, err)
	raw := make([][]byte, n)
	for i := range raw {
		r := strings.NewReplacer(
			"w-00020", fmt.Sprintf("w-%05d", i),
			"32f24859", fmt.Sprintf("%08x", 3*i), "99739840", fmt.Sprintf("%08x", 3*i+1), "7f91207a", fmt.Sprintf("%08x", 3*i+2),
			`"51945"`, fmt.Sprintf(`"%d"`, 100000+i), `"51684"`, fmt.Sprintf(`"%d"`, 200000+i),
		).Replace(string(sample))
		raw[i] = []byte(r)
	}
	return raw
}

// jsonDecoder decodes as the informer of a custom resource does: JSON
// into the scheme's Go type.
func jsonDecoder() runtime.Decoder {
	return serializer.NewCodecFactory(kube.Scheme).UniversalDeserializer()
}

// TestACachedRecommendationReadsBackAsDecoded: interning changes nothing
// a reader sees (the transformed object is equal to the one decoded),
// two recommendations share their equal values and strings, and a copy
// read from the cache shares nothing a writer could change under the
// other.
func TestACachedRecommendationReadsBackAsDecoded(t *testing.T) {
	raw := watchingRecommendations(t, 2)
	dec := jsonDecoder()
	decode := func(b []byte) *v1alpha1.RightsizingRecommendation {
		obj, _, err := dec.Decode(b, nil, nil)
		require.NoError(t, err)
		return obj.(*v1alpha1.RightsizingRecommendation)
	}
	want := decode(raw[0])
	got, err := Transform(decode(raw[0]))
	require.NoError(t, err)
	a := got.(*v1alpha1.RightsizingRecommendation)
	assert.True(t, equality.Semantic.DeepEqual(want, a), "interning changed the recommendation")
	again, err := Transform(a)
	require.NoError(t, err)
	assert.Same(t, a, again, "interning is idempotent")

	got, err = Transform(decode(raw[1]))
	require.NoError(t, err)
	b := got.(*v1alpha1.RightsizingRecommendation)
	assert.Same(t, a.Spec.Containers[0].Requests, b.Spec.Containers[0].Requests, "equal values are one")
	assert.Same(t, a.Spec.Containers[0].Requests, a.Status.Change.Containers[0].Applied.Requests, "in one recommendation too")
	assert.NotSame(t, a.Status.Change.Containers[0].Previous.Requests, a.Status.Change.Containers[0].Applied.Requests,
		"other values are another")
	assert.Equal(t, unsafe.StringData(a.Status.Message), unsafe.StringData(b.Status.History[0].Message), "equal strings are one")
	assert.NotEqual(t, a.Name, b.Name)

	own := decode(raw[0])
	rb := own.Status.Change.RestartBaselines[0]
	own.Status.Change.ThrottlingBaselines = []v1alpha1.ThrottlingBaseline{{Pod: strings.Clone(rb.Pod),
		PodUID: strings.Clone(rb.PodUID), Container: rb.Container}}
	got, err = Transform(own)
	require.NoError(t, err)
	ch := got.(*v1alpha1.RightsizingRecommendation).Status.Change
	assert.Equal(t, unsafe.StringData(ch.RestartBaselines[0].PodUID), unsafe.StringData(ch.ThrottlingBaselines[0].PodUID),
		"a pod's UID is one within the recommendation")
	assert.Equal(t, unsafe.StringData(ch.RestartBaselines[0].Pod), unsafe.StringData(ch.ThrottlingBaselines[0].Pod), "and its name")

	c := a.DeepCopy()
	c.Spec.Containers[0].Requests.Memory.Set(1)
	assert.Equal(t, "192Mi", b.Spec.Containers[0].Requests.Memory.String(), "a copy's values are its own")
}

// TestEqualResourceValuesAreShared: values equal in their amounts and
// formats are one; another amount, format or an unset amount is another;
// and a full table starts over.
func TestEqualResourceValuesAreShared(t *testing.T) {
	in := &valuesInterner{sharedTable[*v1alpha1.ResourceValues]{max: 3}}
	q := func(s string) *resource.Quantity { return new(resource.MustParse(s)) }
	a := in.intern(&v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("256Mi")})
	assert.Same(t, a, in.intern(&v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("256Mi")}))
	assert.NotSame(t, a, in.intern(&v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("268435456")}), "another format is another")
	assert.NotSame(t, a, in.intern(&v1alpha1.ResourceValues{CPU: q("250m")}), "an unset amount is another")
	assert.Nil(t, in.intern(nil))
	assert.Len(t, in.values, 3)
	d := in.intern(&v1alpha1.ResourceValues{Memory: q("1Gi")})
	assert.Len(t, in.values, 1, "the full table started over at the fourth")
	assert.NotSame(t, a, in.intern(&v1alpha1.ResourceValues{CPU: q("250m"), Memory: q("256Mi")}), "values interned before it started over are interned anew")
	assert.Same(t, d, in.intern(&v1alpha1.ResourceValues{Memory: q("1Gi")}))
}

// TestInterningShrinksTheCachedRecommendations measures the live heap of
// 10,000 recommendations as the scale harness's leader held them, decoded
// as the cache decodes them, with the managed fields dropped and with
// interning too (the figure in docs/performance.md, "The sixth round").
func TestInterningShrinksTheCachedRecommendations(t *testing.T) {
	const n = 10000
	raw := watchingRecommendations(t, n)
	dropManaged := func(obj any) (any, error) {
		obj.(*v1alpha1.RightsizingRecommendation).SetManagedFields(nil)
		return obj, nil
	}
	whole, interned, objs := heldHeapOf(t, jsonDecoder(), raw, dropManaged, Transform)
	t.Logf("%d recommendations, live heap: %.0f bytes each decoded, %.0f interned (%.0f %%)",
		n, float64(whole)/n, float64(interned)/n, 100*float64(interned)/float64(whole))
	assert.Less(t, float64(interned), 0.7*float64(whole), "interning saves at least 30 % of a cached recommendation")
	assert.Equal(t, "w-09999", objs[n-1].(*v1alpha1.RightsizingRecommendation).Name)
}

// recommendedRecommendations are n recommendations as JSON, each as the
// recommender made one in the scale harness and the leader applied it
// (testdata/recommendation-recommended.json, read from its apiserver: a
// Rollout change of a Deployment's CPU, watched, with the recommender's
// basis and refusals annotations), with its own name and UIDs. Without
// summed, the refusals annotation is left out, as the recommender wrote
// them before it.
func recommendedRecommendations(t *testing.T, n int, summed bool) [][]byte {
	t.Helper()
	sample, err := os.ReadFile("testdata/recommendation-recommended.json")
	require.NoError(t, err)
	if !summed {
		sample = []byte(strings.Replace(string(sample), `,
      "kerf.dev/recommendation-refusals": "app/memory/request/MinChange/268435456"`, "", 1))
		require.False(t, strings.Contains(string(sample), v1alpha1.RecommendationRefusalsAnnotation), "the refusals annotation left out")
	}
	raw := make([][]byte, n)
	for i := range raw {
		raw[i] = []byte(strings.NewReplacer(
			"w-00150", fmt.Sprintf("w-%05d", i),
			"c536e3a4", fmt.Sprintf("%08x", 3*i), "b6fe441e", fmt.Sprintf("%08x", 3*i+1), "e4a4d186", fmt.Sprintf("%08x", 3*i+2),
		).Replace(string(sample)))
	}
	return raw
}

// TestTheCacheDropsTheBasisItsRefusalsAnnotationSums: a recommendation
// with the refusals annotation is cached without its basis, and holds a
// quarter less heap; one without it keeps its basis. Nothing else
// changes, and a map the transform is handed is not written.
func TestTheCacheDropsTheBasisItsRefusalsAnnotationSums(t *testing.T) {
	dec := jsonDecoder()
	decode := func(b []byte) *v1alpha1.RightsizingRecommendation {
		obj, _, err := dec.Decode(b, nil, nil)
		require.NoError(t, err)
		return obj.(*v1alpha1.RightsizingRecommendation)
	}
	summed, old := recommendedRecommendations(t, 1, true)[0], recommendedRecommendations(t, 1, false)[0]

	in := decode(summed)
	handed := in.Annotations
	got, err := Transform(in)
	require.NoError(t, err)
	cached := got.(*v1alpha1.RightsizingRecommendation)
	assert.NotContains(t, cached.Annotations, v1alpha1.RecommendationBasisAnnotation, "the basis is dropped")
	assert.Equal(t, "app/memory/request/MinChange/268435456", cached.Annotations[v1alpha1.RecommendationRefusalsAnnotation])
	assert.Contains(t, handed, v1alpha1.RecommendationBasisAnnotation, "the map handed to the transform is not written")
	want := decode(summed)
	delete(want.Annotations, v1alpha1.RecommendationBasisAnnotation)
	assert.True(t, equality.Semantic.DeepEqual(want, cached), "only the basis is dropped")
	again, err := Transform(cached)
	require.NoError(t, err)
	assert.Same(t, cached, again, "idempotent")

	got, err = Transform(decode(old))
	require.NoError(t, err)
	assert.NotEmpty(t, got.(*v1alpha1.RightsizingRecommendation).Annotations[v1alpha1.RecommendationBasisAnnotation],
		"written before the refusals annotation: the basis is the only record of the refusals, and is kept")

	const n = 10000
	_, kept, _ := heldHeapOf(t, dec, recommendedRecommendations(t, n, false), Transform, Transform)
	_, dropped, objs := heldHeapOf(t, dec, recommendedRecommendations(t, n, true), Transform, Transform)
	t.Logf("%d recommendations, live heap cached: %.0f bytes each with the basis, %.0f without (%.0f %%)",
		n, float64(kept)/n, float64(dropped)/n, 100*float64(dropped)/float64(kept))
	assert.Less(t, float64(dropped), 0.8*float64(kept), "the basis is more than a fifth of a cached recommendation")
	assert.Equal(t, "w-09999", objs[n-1].(*v1alpha1.RightsizingRecommendation).Name)
}

// TestInterningAStoredRecommendationAgainWritesNothing: the informer may
// hand an object it stores to the transform again while readers copy it
// (a Replace). Interning then writes nothing, so the race detector, which
// make test runs, sees no write beside the copies. Before, the strings
// and pointers were set again, the shared policy reference's among them.
func TestInterningAStoredRecommendationAgainWritesNothing(t *testing.T) {
	dec := jsonDecoder()
	var stored []*v1alpha1.RightsizingRecommendation
	for _, b := range recommendedRecommendations(t, 3, true) {
		obj, _, err := dec.Decode(b, nil, nil)
		require.NoError(t, err)
		got, err := Transform(obj)
		require.NoError(t, err)
		stored = append(stored, got.(*v1alpha1.RightsizingRecommendation))
	}
	require.Same(t, stored[0].Status.Policy, stored[1].Status.Policy, "the policy reference is shared")
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		for range 200 {
			for _, r := range stored {
				_ = r.DeepCopy()
			}
		}
	}()
	for range 200 {
		for _, r := range stored {
			again, err := Transform(r)
			require.NoError(t, err)
			require.Same(t, r, again)
		}
	}
	<-copied
}

// TestACachedRecommendationGrowsWithItsHistory measures what each action
// of status.history adds to a cached recommendation. The scale harness's
// recommendations hold one or two actions; a workload rightsized for
// months holds up to v1alpha1.MaxHistory (100). docs/performance.md,
// "What a long history costs", has the figures.
func TestACachedRecommendationGrowsWithItsHistory(t *testing.T) {
	const n = 500
	dec := jsonDecoder()
	perAction := map[int]float64{}
	for _, actions := range []int{1, 10, v1alpha1.MaxHistory} {
		raw := recommendedRecommendations(t, n, true)
		for i := range raw {
			obj, _, err := dec.Decode(raw[i], nil, nil)
			require.NoError(t, err)
			rsr := obj.(*v1alpha1.RightsizingRecommendation)
			first := rsr.Status.History[0]
			rsr.Status.History = nil
			for k := range actions {
				a := *first.DeepCopy()
				a.Seq = int64(k + 1)
				a.Time.Time = first.Time.Add(time.Duration(k) * 37 * time.Minute)
				rsr.Status.History = append(rsr.Status.History, a)
			}
			raw[i], err = json.Marshal(rsr)
			require.NoError(t, err)
		}
		_, cached, _ := heldHeapOf(t, dec, raw, Transform, Transform)
		perAction[actions] = float64(cached) / n
		t.Logf("%3d actions in status.history: %6.0f bytes a cached recommendation", actions, float64(cached)/n)
	}
	each := (perAction[v1alpha1.MaxHistory] - perAction[1]) / float64(v1alpha1.MaxHistory-1)
	t.Logf("each action: %.0f bytes; at 25,000 workloads a full history is %.0f MB more than one action",
		each, each*float64(v1alpha1.MaxHistory-1)*25000/1e6)
	assert.Less(t, each, 350.0, "docs/performance.md states about 310 bytes an action")
}
