package resources

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// rr builds requirements from requests and limits of cpu and memory, in
// that order; an empty string leaves the value out.
func rr(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, v := range []struct {
		into  corev1.ResourceList
		name  corev1.ResourceName
		value string
	}{
		{out.Requests, corev1.ResourceCPU, reqCPU}, {out.Requests, corev1.ResourceMemory, reqMem},
		{out.Limits, corev1.ResourceCPU, limCPU}, {out.Limits, corev1.ResourceMemory, limMem},
	} {
		if v.value != "" {
			v.into[v.name] = resource.MustParse(v.value)
		}
	}
	return out
}

func TestFieldsReadAndWriteBothRepresentations(t *testing.T) {
	cases := []struct {
		field Field
		name  string
	}{
		{Fields[0], "requests.cpu"},
		{Fields[1], "requests.memory"},
		{Fields[2], "limits.cpu"},
		{Fields[3], "limits.memory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.field
			assert.Equal(t, tc.name, f.String())

			var req, lim *v1alpha1.ResourceValues
			assert.Nil(t, f.Get(req, lim))
			f.Set(&req, &lim, q("250m"))
			require.NotNil(t, f.Get(req, lim))
			assert.Equal(t, "250m", f.Get(req, lim).String())
			for _, other := range Fields {
				if other != f {
					assert.Nil(t, other.Get(req, lim), "only %s is written", f)
				}
			}
			f.Set(&req, &lim, nil)
			assert.Nil(t, req, "values left empty become nil")
			assert.Nil(t, lim, "values left empty become nil")

			var rr corev1.ResourceRequirements
			assert.Nil(t, f.In(&rr))
			f.SetIn(&rr, q("1Gi"))
			require.NotNil(t, f.In(&rr))
			assert.Equal(t, "1Gi", f.In(&rr).String())
			f.SetIn(&rr, nil)
			assert.Nil(t, f.In(&rr))
		})
	}
}

func TestSetCopiesTheQuantity(t *testing.T) {
	v := q("1")
	var req, lim *v1alpha1.ResourceValues
	Fields[0].Set(&req, &lim, v)
	v.Add(resource.MustParse("1"))
	assert.Equal(t, "1", req.CPU.String())
}

func TestSameQuantity(t *testing.T) {
	cases := []struct {
		name string
		a, b *resource.Quantity
		want bool
	}{
		{"both absent", nil, nil, true},
		{"one absent", q("1"), nil, false},
		{"the other absent", nil, q("1"), false},
		{"250m equals 0.25", q("250m"), q("0.25"), true},
		{"different amounts", q("1Gi"), q("1G"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, SameQuantity(tc.a, tc.b))
		})
	}
}

func TestContainerValuesKeepsCPUAndMemory(t *testing.T) {
	c := &corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}}
	got := ContainerValues(c)
	assert.Equal(t, "app", got.Name)
	require.NotNil(t, got.Requests)
	assert.Equal(t, "100m", got.Requests.CPU.String())
	assert.Nil(t, got.Requests.Memory)
	require.NotNil(t, got.Limits)
	assert.Nil(t, got.Limits.CPU)
	assert.Equal(t, "256Mi", got.Limits.Memory.String())
}

func TestMoved(t *testing.T) {
	cc := func(prev, applied v1alpha1.Resources) *v1alpha1.ContainerChange {
		return &v1alpha1.ContainerChange{Name: "app", Previous: prev, Applied: applied}
	}
	reqCPU := func(s string) v1alpha1.Resources {
		return v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q(s)}}
	}
	limMem := func(s string) v1alpha1.Resources {
		return v1alpha1.Resources{Limits: &v1alpha1.ResourceValues{Memory: q(s)}}
	}
	cases := []struct {
		name   string
		change *v1alpha1.ContainerChange
		res    v1alpha1.ResourceName
		want   bool
	}{
		{"a request that changed", cc(reqCPU("1"), reqCPU("500m")), v1alpha1.ResourceCPU, true},
		{"the same amount written otherwise", cc(reqCPU("1"), reqCPU("1000m")), v1alpha1.ResourceCPU, false},
		{"a value that had none", cc(v1alpha1.Resources{}, limMem("1Gi")), v1alpha1.ResourceMemory, true},
		{"another resource", cc(reqCPU("1"), reqCPU("500m")), v1alpha1.ResourceMemory, false},
		{"nothing applied", cc(limMem("1Gi"), v1alpha1.Resources{}), v1alpha1.ResourceMemory, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Moved(tc.change, tc.res))
		})
	}
}

func TestPreviousAndAppliedCopyOneSide(t *testing.T) {
	change := &v1alpha1.Change{Containers: []v1alpha1.ContainerChange{{
		Name:     "app",
		Previous: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("1")}},
		Applied:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("500m")}, Limits: &v1alpha1.ResourceValues{Memory: q("1Gi")}},
	}}}
	prev := Previous(change)
	require.Len(t, prev, 1)
	assert.Equal(t, "1", prev[0].Requests.CPU.String())
	assert.Nil(t, prev[0].Limits)

	applied := Applied(change)
	require.Len(t, applied, 1)
	assert.Equal(t, "500m", applied[0].Requests.CPU.String())
	assert.Equal(t, "1Gi", applied[0].Limits.Memory.String())
	applied[0].Requests.CPU = q("2")
	assert.Equal(t, "500m", change.Containers[0].Applied.Requests.CPU.String(), "a copy, not the change's own values")
}

func TestLimitBelowRequest(t *testing.T) {
	cases := []struct {
		name     string
		rr       corev1.ResourceRequirements
		want     corev1.ResourceName
		req, lim string
	}{
		{"no values", rr("", "", "", ""), "", "", ""},
		{"request only", rr("2", "", "", ""), "", "", ""},
		{"limit only", rr("", "", "1", ""), "", "", ""},
		{"equal", rr("1", "1Gi", "1000m", "1Gi"), "", "", ""},
		{"cpu limit below", rr("2", "", "1", ""), corev1.ResourceCPU, "2", "1"},
		{"memory limit below", rr("1", "2Gi", "2", "1Gi"), corev1.ResourceMemory, "2Gi", "1Gi"},
		{"cpu reported first", rr("2", "2Gi", "1", "1Gi"), corev1.ResourceCPU, "2", "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lb, bad := LimitBelowRequest(tc.rr)
			assert.Equal(t, tc.want != "", bad)
			if !bad {
				return
			}
			assert.Equal(t, tc.want, lb.Resource)
			assert.Equal(t, tc.req, lb.Request.String())
			assert.Equal(t, tc.lim, lb.Limit.String())
		})
	}
}

func TestQOSClassFollowsTheAPIServer(t *testing.T) {
	spec := func(rrs ...corev1.ResourceRequirements) *corev1.PodSpec {
		s := &corev1.PodSpec{}
		for _, r := range rrs {
			s.Containers = append(s.Containers, corev1.Container{Resources: r})
		}
		return s
	}
	cases := []struct {
		name string
		spec *corev1.PodSpec
		want corev1.PodQOSClass
	}{
		{"no values", spec(rr("", "", "", "")), corev1.PodQOSBestEffort},
		{"requests equal limits", spec(rr("1", "1Gi", "1", "1Gi")), corev1.PodQOSGuaranteed},
		{"limits only default the requests", spec(rr("", "", "1", "1Gi")), corev1.PodQOSGuaranteed},
		{"1000m equals 1", spec(rr("1000m", "1Gi", "1", "1024Mi")), corev1.PodQOSGuaranteed},
		{"request below limit", spec(rr("500m", "1Gi", "1", "1Gi")), corev1.PodQOSBurstable},
		{"cpu only", spec(rr("1", "", "1", "")), corev1.PodQOSBurstable},
		{"Guaranteed with BestEffort", spec(rr("1", "1Gi", "1", "1Gi"), rr("", "", "", "")), corev1.PodQOSBurstable},
		{"two Guaranteed", spec(rr("1", "1Gi", "1", "1Gi"), rr("2", "1Gi", "2", "1Gi")), corev1.PodQOSGuaranteed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := QOSClass(tc.spec)
			assert.True(t, ok)
			assert.Equal(t, tc.want, got)
		})
	}

	podLevel := spec(rr("1", "1Gi", "1", "1Gi"))
	podLevel.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	_, ok := QOSClass(podLevel)
	assert.False(t, ok, "pod-level resources decide the class, not the containers")

	// An init container counts, and its absent request is its limit's.
	withInit := spec(rr("1", "1Gi", "1", "1Gi"))
	withInit.InitContainers = []corev1.Container{{Resources: rr("", "", "1", "1Gi")}}
	got, _ := QOSClass(withInit)
	assert.Equal(t, corev1.PodQOSGuaranteed, got)
	withInit.InitContainers[0].Resources = rr("500m", "", "1", "1Gi")
	got, _ = QOSClass(withInit)
	assert.Equal(t, corev1.PodQOSBurstable, got)
	// It reads the spec where it is: the recommender asks for every
	// workload it recommends for.
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = QOSClass(withInit) }))
}
