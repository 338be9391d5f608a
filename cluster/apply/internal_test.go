package apply

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestHPATargetKeepsUtilizationTimesRequest(t *testing.T) {
	cases := []struct {
		name             string
		old              int32
		oldMilli, newMil int64
		want             int32
	}{
		{"doubling the request halves the target", 60, 500, 1000, 30},
		{"halving the request doubles it past 100", 80, 1000, 500, 160},
		{"rounds half away from zero", 50, 300, 400, 38}, // 37.5
		{"rounds down below half", 70, 500, 600, 58},     // 58.33
		{"never below 1", 1, 100, 1000, 1},
		{"capped at the int32 range", math.MaxInt32, 1000, 1, math.MaxInt32},
		{"an unknown new request keeps the target", 60, 500, 0, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hpaTarget(tc.old, tc.oldMilli, tc.newMil))
		})
	}
}

func TestQOSClassFollowsTheAPIServer(t *testing.T) {
	rr := func(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
		l := func(cpu, mem string) corev1.ResourceList {
			out := corev1.ResourceList{}
			if cpu != "" {
				out[corev1.ResourceCPU] = resource.MustParse(cpu)
			}
			if mem != "" {
				out[corev1.ResourceMemory] = resource.MustParse(mem)
			}
			return out
		}
		return corev1.ResourceRequirements{Requests: l(reqCPU, reqMem), Limits: l(limCPU, limMem)}
	}
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
			got, ok := qosClass(tc.spec)
			assert.True(t, ok)
			assert.Equal(t, tc.want, got)
		})
	}

	podLevel := spec(rr("1", "1Gi", "1", "1Gi"))
	podLevel.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	_, ok := qosClass(podLevel)
	assert.False(t, ok, "pod-level resources decide the class, not the containers")
}
