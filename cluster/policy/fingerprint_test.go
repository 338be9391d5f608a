package policy

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
func i32(v int32) *int32                   { return &v }

// basePolicy is a spec with a bit of everything, none of it defaulted.
func basePolicy() v1alpha1.PolicySpec {
	return v1alpha1.PolicySpec{
		Weight: 2,
		Selector: v1alpha1.PolicySelector{
			WorkloadSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"team": "a"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}},
					{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist},
				},
			},
			Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindStatefulSet, v1alpha1.KindDeployment},
		},
		Guardrails: v1alpha1.Guardrails{
			FreezeWindows: []v1alpha1.FreezeWindow{{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}},
			Rollback:      v1alpha1.RollbackGuardrails{WatchDuration: dur(time.Hour)},
		},
	}
}

func TestFingerprintIsSixteenHexDigits(t *testing.T) {
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	assert.Regexp(t, hex16, Fingerprint(basePolicy()))
	assert.Regexp(t, hex16, Fingerprint(v1alpha1.PolicySpec{}))
	assert.Regexp(t, hex16, ValueFingerprint(nil))
}

func TestFingerprintStaysForUnchangedPolicy(t *testing.T) {
	base := Fingerprint(basePolicy())
	tests := []struct {
		name   string
		mutate func(*v1alpha1.PolicySpec)
	}{
		{"nothing", func(*v1alpha1.PolicySpec) {}},
		{"defaults spelled out", func(s *v1alpha1.PolicySpec) { s.SetDefaults() }},
		{"default time zone written", func(s *v1alpha1.PolicySpec) { s.Guardrails.FreezeWindows[0].TimeZone = "UTC" }},
		{"default cooldown written", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Cooldown = dur(24 * time.Hour) }},
		{"duration spelled 60m", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.WatchDuration = dur(60 * time.Minute) }},
		{"kinds reordered", func(s *v1alpha1.PolicySpec) {
			s.Selector.Kinds = []v1alpha1.WorkloadKind{v1alpha1.KindDeployment, v1alpha1.KindStatefulSet}
		}},
		{"expressions and their values reordered", func(s *v1alpha1.PolicySpec) {
			e := s.Selector.WorkloadSelector.MatchExpressions
			e[0], e[1] = e[1], e[0]
			e[1].Values = []string{"api", "web"}
		}},
		{"empty namespace selector", func(s *v1alpha1.PolicySpec) { s.Selector.NamespaceSelector = &metav1.LabelSelector{} }},
		{"empty degraded", func(s *v1alpha1.PolicySpec) { s.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{} }},
		{"degraded defaults written", func(s *v1alpha1.PolicySpec) {
			s.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{RolledBack: i32(3), Of: i32(5)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := basePolicy()
			tt.mutate(&s)
			assert.Equal(t, base, Fingerprint(s))
		})
	}
}

func TestFingerprintChangesWithAnyChange(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1alpha1.PolicySpec)
	}{
		{"weight", func(s *v1alpha1.PolicySpec) { s.Weight = 3 }},
		{"paused", func(s *v1alpha1.PolicySpec) { s.Guardrails.Paused = true }},
		{"kind added", func(s *v1alpha1.PolicySpec) { s.Selector.Kinds = append(s.Selector.Kinds, v1alpha1.KindDaemonSet) }},
		{"kinds emptied", func(s *v1alpha1.PolicySpec) { s.Selector.Kinds = nil }},
		{"workload label", func(s *v1alpha1.PolicySpec) { s.Selector.WorkloadSelector.MatchLabels["team"] = "b" }},
		{"expression value", func(s *v1alpha1.PolicySpec) { s.Selector.WorkloadSelector.MatchExpressions[0].Values[0] = "www" }},
		{"namespace selector", func(s *v1alpha1.PolicySpec) {
			s.Selector.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		}},
		{"freeze schedule", func(s *v1alpha1.PolicySpec) { s.Guardrails.FreezeWindows[0].Schedule = "0 8 * * 1-5" }},
		{"freeze duration", func(s *v1alpha1.PolicySpec) { s.Guardrails.FreezeWindows[0].Duration.Duration = 9 * time.Hour }},
		{"freeze time zone", func(s *v1alpha1.PolicySpec) { s.Guardrails.FreezeWindows[0].TimeZone = "Europe/Paris" }},
		{"freeze window removed", func(s *v1alpha1.PolicySpec) { s.Guardrails.FreezeWindows = nil }},
		{"watch duration", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.WatchDuration = dur(2 * time.Hour) }},
		{"oom kills", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.OOMKills = i32(2) }},
		{"oom kills off", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.OOMKills = i32(0) }},
		{"restarts", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Restarts = i32(5) }},
		{"throttling ratio", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.ThrottlingRatio = "0.5" }},
		{"cooldown", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Cooldown = dur(time.Hour) }},
		{"cooldown off", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Cooldown = dur(0) }},
		{"restore to", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.RestoreTo = v1alpha1.RestoreManifest }},
		{"adoption threshold", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.AdoptionThresholdPercent = 50 }},
		{"backoff time period", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Backoff.TimePeriod = dur(time.Minute) }},
		{"backoff multiply by turn", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Backoff.MultiplyByTurn = 2 }},
		{"backoff max attempts", func(s *v1alpha1.PolicySpec) { s.Guardrails.Rollback.Backoff.MaxAttempts = 3 }},
		{"degraded rolled back", func(s *v1alpha1.PolicySpec) { s.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{RolledBack: i32(2)} }},
		{"degraded of", func(s *v1alpha1.PolicySpec) { s.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{Of: i32(10)} }},
		{"degraded off", func(s *v1alpha1.PolicySpec) { s.Guardrails.Degraded = &v1alpha1.DegradedGuardrails{Disabled: true} }},
	}
	seen := map[string]string{Fingerprint(basePolicy()): "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := basePolicy()
			tt.mutate(&s)
			fp := Fingerprint(s)
			if other, dup := seen[fp]; dup {
				t.Errorf("fingerprint %s of %q is the same as %q's", fp, tt.name, other)
			}
			seen[fp] = tt.name
		})
	}
}

func TestFingerprintLeavesSpecAlone(t *testing.T) {
	s := basePolicy()
	before := s.DeepCopy()
	Fingerprint(s)
	assert.Equal(t, *before, s)
}

// cr is a container's values; "" leaves a value absent.
func cr(name, reqCPU, reqMem, limCPU, limMem string) v1alpha1.ContainerResources {
	vals := func(cpu, mem string) *v1alpha1.ResourceValues {
		if cpu == "" && mem == "" {
			return nil
		}
		v := &v1alpha1.ResourceValues{}
		if cpu != "" {
			q := resource.MustParse(cpu)
			v.CPU = &q
		}
		if mem != "" {
			q := resource.MustParse(mem)
			v.Memory = &q
		}
		return v
	}
	return v1alpha1.ContainerResources{Name: name, Requests: vals(reqCPU, reqMem), Limits: vals(limCPU, limMem)}
}

func TestValueFingerprintIgnoresOrderAndSpelling(t *testing.T) {
	base := ValueFingerprint([]v1alpha1.ContainerResources{
		cr("app", "1", "1Gi", "2", "2Gi"),
		cr("sidecar", "250m", "128Mi", "", ""),
	})
	tests := []struct {
		name       string
		containers []v1alpha1.ContainerResources
	}{
		{"containers reordered", []v1alpha1.ContainerResources{cr("sidecar", "250m", "128Mi", "", ""), cr("app", "1", "1Gi", "2", "2Gi")}},
		{"cpu in millicores", []v1alpha1.ContainerResources{cr("app", "1000m", "1Gi", "2000m", "2Gi"), cr("sidecar", "250m", "128Mi", "", "")}},
		{"cpu as a decimal", []v1alpha1.ContainerResources{cr("app", "1.0", "1Gi", "2", "2Gi"), cr("sidecar", "0.25", "128Mi", "", "")}},
		{"memory in bytes", []v1alpha1.ContainerResources{cr("app", "1", "1073741824", "2", "2147483648"), cr("sidecar", "250m", "134217728", "", "")}},
		{"memory in Ki and exponent", []v1alpha1.ContainerResources{cr("app", "1", "1048576Ki", "2", "2Gi"), cr("sidecar", "250m", "131072Ki", "", "")}},
		{"empty limits object", []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "2", "2Gi"), func() v1alpha1.ContainerResources {
			c := cr("sidecar", "250m", "128Mi", "", "")
			c.Limits = &v1alpha1.ResourceValues{}
			return c
		}()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, base, ValueFingerprint(tt.containers))
		})
	}
}

func TestValueFingerprintDistinguishesValues(t *testing.T) {
	tests := []struct {
		name       string
		containers []v1alpha1.ContainerResources
	}{
		{"base", []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "", "")}},
		{"cpu request zero instead of absent", []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "0", "")}},
		{"cpu limit set", []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "1", "")}},
		{"value moved from requests to limits", []v1alpha1.ContainerResources{cr("app", "", "1Gi", "1", "")}},
		{"cpu changed by a millicore", []v1alpha1.ContainerResources{cr("app", "1001m", "1Gi", "", "")}},
		{"memory 1G instead of 1Gi", []v1alpha1.ContainerResources{cr("app", "1", "1G", "", "")}},
		{"container renamed", []v1alpha1.ContainerResources{cr("web", "1", "1Gi", "", "")}},
		{"container added", []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "", ""), cr("log", "", "", "", "")}},
		{"memory absent", []v1alpha1.ContainerResources{cr("app", "1", "", "", "")}},
		{"memory zero", []v1alpha1.ContainerResources{cr("app", "1", "0", "", "")}},
		{"no containers", nil},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		fp := ValueFingerprint(tt.containers)
		if other, dup := seen[fp]; dup {
			t.Errorf("fingerprint %s of %q is the same as %q's", fp, tt.name, other)
		}
		seen[fp] = tt.name
	}
}

func TestValueFingerprintLeavesQuantitiesAlone(t *testing.T) {
	cs := []v1alpha1.ContainerResources{cr("app", "1500m", "1Gi", "", "")}
	before := cs[0].DeepCopy()
	ValueFingerprint(cs)
	assert.Equal(t, *before, cs[0])
	assert.Equal(t, "1500m", cs[0].Requests.CPU.String())
}

func TestCanonicalQuantity(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"},
		{"0m", "0"},
		{"1", "1"},
		{"1000m", "1"},
		{"1500m", "1.5"},
		{"0.25", "0.25"},
		{"1m", "0.001"},
		{"100n", "0.0000001"},
		{"1k", "1000"},
		{"1e3", "1000"},
		{"1Ki", "1024"},
		{"1Gi", "1073741824"},
		{"1.5Gi", "1610612736"},
		{"12e6", "12000000"},
		{"-1500m", "-1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			q := resource.MustParse(tt.in)
			assert.Equal(t, tt.want, canonicalQuantity(&q))
		})
	}
	require.Empty(t, canonicalQuantity(nil))
}

// TestSameValuesIsTheFingerprintsEquality: SameValues(a, b) holds exactly
// when ValueFingerprint(a) == ValueFingerprint(b), over random sets of
// containers (names repeated, quantities spelled in several ways, values
// absent, empty or zero), and it allocates nothing.
func TestSameValuesIsTheFingerprintsEquality(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	cpus := []string{"", "0", "1", "1000m", "250m", "0.25"}
	mems := []string{"", "0", "1Gi", "1073741824", "1024Mi", "256Mi"}
	quantity := func(options []string) *resource.Quantity {
		s := options[rng.IntN(len(options))]
		if s == "" {
			return nil
		}
		q := resource.MustParse(s)
		return &q
	}
	values := func() *v1alpha1.ResourceValues {
		if rng.IntN(5) == 0 {
			return nil
		}
		return &v1alpha1.ResourceValues{CPU: quantity(cpus), Memory: quantity(mems)}
	}
	containers := func() []v1alpha1.ContainerResources {
		out := make([]v1alpha1.ContainerResources, rng.IntN(4))
		for i := range out {
			out[i] = v1alpha1.ContainerResources{Name: []string{"app", "sidecar", "pod"}[rng.IntN(3)], Requests: values(), Limits: values()}
		}
		return out
	}
	same := 0
	for range 20000 {
		a, b := containers(), containers()
		if rng.IntN(3) == 0 { // b a shuffle of a, so that many pairs are the same
			b = slices.Clone(a)
			rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		}
		want := ValueFingerprint(a) == ValueFingerprint(b)
		require.Equal(t, want, SameValues(a, b), "%v against %v", a, b)
		if want {
			same++
		}
	}
	assert.Greater(t, same, 2000, "enough pairs alike to test")
	a := []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: quantity([]string{"1"})}}}
	assert.Zero(t, testing.AllocsPerRun(100, func() { SameValues(a, a) }))
}
