package v1alpha1_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// TestRecommendationBasisReadsAnnotationsAsWrittenAndWritesThemBackTheSame
// keeps the annotation's JSON stable: the literals are what the
// recommender wrote before the schema moved here (its json.Marshal of
// cluster's recommendationBasis), so objects already in clusters still
// parse, and a basis written again reads the same.
func TestRecommendationBasisReadsAnnotationsAsWrittenAndWritesThemBackTheSame(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation string
		check      func(t *testing.T, b *v1alpha1.RecommendationBasis)
	}{
		{
			name: "source VPA with bounds and refusals",
			annotation: `{"madeAt":"2025-03-14T10:00:00Z","policy":"ClusterRightsizingPolicy/default","cpuPercentile":0.9,"memoryPercentile":0.95,"safetyMargin":0.15,` +
				`"containers":[{"name":"app","samples":8640,"history":"24h0m0s","confidence":1,"targetCPUMilli":120,"targetMemoryBytes":125829120,` +
				`"refusals":[{"resource":"memory","field":"limit","reason":"OOMKill","asked":134217728,"held":268435456,"observed":261095424,"threshold":313314509,"at":"2025-03-14T09:26:53Z",` +
				`"message":"memory limit held at 256Mi instead of 128Mi: OOMKill at 2025-03-14T09:26:53Z (peak 249Mi, floor 298.8Mi)"},` +
				`{"resource":"cpu","field":"request","reason":"Throttled","asked":100,"held":250,"observed":0.3125,"threshold":0.1,"message":"cpu request held at 250m instead of 100m: Throttled (throttling ratio 0.312 \u003e= 0.1)"}],` +
				`"lower":{"cpuMilli":60,"memoryBytes":94371840},"upper":{"cpuMilli":240}},` +
				`{"name":"sidecar","samples":12,"history":"2m0s","confidence":0.008333333333333333,"targetCPUMilli":10,"targetMemoryBytes":16777216}],` +
				`"source":"VPA","vpa":"web","vpaUpdateMode":"Off"}`,
			check: func(t *testing.T, b *v1alpha1.RecommendationBasis) {
				assert.Equal(t, time.Date(2025, 3, 14, 10, 0, 0, 0, time.UTC), b.MadeAt)
				assert.Equal(t, "ClusterRightsizingPolicy/default", b.Policy)
				assert.Equal(t, v1alpha1.RecommendSourceVPA, b.Source)
				assert.Equal(t, "web", b.VPA)
				assert.Equal(t, "Off", b.VPAUpdateMode)
				require.Len(t, b.Containers, 2)
				app := b.Containers[0]
				assert.Equal(t, uint32(8640), app.Samples)
				assert.Equal(t, &v1alpha1.BoundBasis{CPUMilli: 60, MemoryBytes: 90 << 20}, app.Lower)
				assert.Equal(t, &v1alpha1.BoundBasis{CPUMilli: 240}, app.Upper)
				require.Len(t, app.Refusals, 2)
				oom := app.Refusals[0]
				assert.Equal(t, v1alpha1.ResourceMemory, oom.Resource)
				assert.Equal(t, "limit", oom.Field)
				assert.Equal(t, "OOMKill", oom.Reason)
				assert.Equal(t, int64(256<<20), oom.Held)
				require.NotNil(t, oom.At)
				assert.Equal(t, time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC), oom.At.UTC())
				assert.Nil(t, app.Refusals[1].At)
				assert.InDelta(t, 0.3125, app.Refusals[1].Observed, 0)
				assert.Nil(t, b.Containers[1].Lower)
				assert.Empty(t, b.Containers[1].Refusals)
			},
		},
		{
			name: "source Kerf, a watch running",
			annotation: `{"madeAt":"2025-06-01T08:30:05Z","policy":"RightsizingPolicy/shop","cpuPercentile":0.9,"memoryPercentile":0.9,"safetyMargin":0.15,` +
				`"containers":[{"name":"api","samples":0,"history":"","confidence":0,"targetCPUMilli":0,"targetMemoryBytes":0,` +
				`"refusals":[{"resource":"cpu","field":"request","reason":"WatchRunning","asked":200,"held":300,"observed":0,"threshold":0,"at":"2025-06-01T08:20:00Z",` +
				`"message":"cpu request held at 300m instead of 200m: WatchRunning (the change applied at 2025-06-01T08:20:00Z is still watched)"}]}],"source":"Kerf"}`,
			check: func(t *testing.T, b *v1alpha1.RecommendationBasis) {
				assert.Equal(t, v1alpha1.RecommendSourceKerf, b.Source)
				assert.Empty(t, b.VPA)
				require.Len(t, b.Containers, 1)
				require.Len(t, b.Containers[0].Refusals, 1)
				assert.Equal(t, "WatchRunning", b.Containers[0].Refusals[0].Reason)
			},
		},
		{
			name:       "before source and bounds existed",
			annotation: `{"madeAt":"2024-11-02T23:59:59Z","policy":"ClusterRightsizingPolicy/default","cpuPercentile":0.9,"memoryPercentile":0.9,"safetyMargin":0.15,"containers":[{"name":"app","samples":5,"history":"5m0s","confidence":0.0035,"targetCPUMilli":25,"targetMemoryBytes":33554432}]}`,
			check: func(t *testing.T, b *v1alpha1.RecommendationBasis) {
				assert.Empty(t, b.Source)
				require.Len(t, b.Containers, 1)
				assert.Equal(t, int64(32<<20), b.Containers[0].TargetMemoryBytes)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := v1alpha1.ParseRecommendationBasis(tc.annotation)
			require.NoError(t, err)
			tc.check(t, b)
			again, err := b.Encode()
			require.NoError(t, err)
			assert.Equal(t, tc.annotation, again, "written back byte for byte")
		})
	}
}

// TestParseRecommendationBasisNamesTheFieldAtFault: a bad annotation's
// error names the annotation and, when the JSON is well formed, the field.
func TestParseRecommendationBasisNamesTheFieldAtFault(t *testing.T) {
	for _, tc := range []struct {
		name, annotation, want string
	}{
		{"a number as a string", `{"containers":[{"name":"app","samples":"many"}]}`,
			"annotation kerf.dev/recommendation-basis: field containers.samples: a JSON string, want uint32"},
		{"madeAt not a time", `{"madeAt":"yesterday"}`,
			`annotation kerf.dev/recommendation-basis: field madeAt or containers.refusals.at: parsing time "yesterday"`},
		{"a refusal's at not a time", `{"madeAt":"2025-03-14T10:00:00Z","containers":[{"refusals":[{"at":"soon"}]}]}`,
			`annotation kerf.dev/recommendation-basis: field madeAt or containers.refusals.at: parsing time "soon"`},
		{"not an object", `[]`, "annotation kerf.dev/recommendation-basis: a JSON array, want an object"},
		{"not JSON", `{"madeAt":`, "annotation kerf.dev/recommendation-basis: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := v1alpha1.ParseRecommendationBasis(tc.annotation)
			require.Error(t, err)
			assert.Nil(t, b)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestRefusalKeysReadBackAsWritten: the refusals annotation says each
// refusal of the basis in its order, and reads back into the same keys.
func TestRefusalKeysReadBackAsWritten(t *testing.T) {
	b := v1alpha1.RecommendationBasis{Containers: []v1alpha1.ContainerBasis{
		{Name: "app", Refusals: []v1alpha1.RefusalBasis{
			{Resource: v1alpha1.ResourceMemory, Field: "limit", Reason: "OOMKill", Asked: 1 << 27, Held: 1 << 28, Message: "held"},
			{Resource: v1alpha1.ResourceCPU, Field: "request", Reason: "Throttled", Held: 250},
		}},
		{Name: "sidecar"},
		{Name: v1alpha1.PodLevel, Refusals: []v1alpha1.RefusalBasis{{Resource: v1alpha1.ResourceCPU, Field: "limit", Reason: "MinChange", Held: 1000}}},
	}}
	raw := b.RefusalKeys()
	assert.Equal(t, "app/memory/limit/OOMKill/268435456,app/cpu/request/Throttled/250,(pod)/cpu/limit/MinChange/1000", raw)
	keys, err := v1alpha1.ParseRefusalKeys(raw)
	require.NoError(t, err)
	assert.Equal(t, []v1alpha1.RefusalKey{
		{Container: "app", Resource: v1alpha1.ResourceMemory, Field: "limit", Reason: "OOMKill", Held: 1 << 28},
		{Container: "app", Resource: v1alpha1.ResourceCPU, Field: "request", Reason: "Throttled", Held: 250},
		{Container: v1alpha1.PodLevel, Resource: v1alpha1.ResourceCPU, Field: "limit", Reason: "MinChange", Held: 1000},
	}, keys)

	none := v1alpha1.RecommendationBasis{Containers: []v1alpha1.ContainerBasis{{Name: "app"}}}
	assert.Empty(t, none.RefusalKeys())
	keys, err = v1alpha1.ParseRefusalKeys("")
	assert.NoError(t, err)
	assert.Empty(t, keys)

	for annotation, want := range map[string]string{
		"app/cpu/request/Throttled":      `key 0 "app/cpu/request/Throttled": want container/resource/field/reason/held`,
		"app/cpu/request/Throttled/1,x":  `key 1 "x": want`,
		"app/cpu/request/Throttled/250m": `key 0 "app/cpu/request/Throttled/250m": held: strconv.ParseInt`,
	} {
		_, err := v1alpha1.ParseRefusalKeys(annotation)
		require.Error(t, err, annotation)
		assert.Contains(t, err.Error(), "annotation kerf.dev/recommendation-refusals: "+want)
	}
}
