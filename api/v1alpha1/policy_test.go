package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// defaultedRollback is spec.guardrails.rollback with every default of
// docs/design.md section 2.
func defaultedRollback() v1alpha1.RollbackGuardrails {
	return v1alpha1.RollbackGuardrails{
		WatchDuration:            &metav1.Duration{Duration: 30 * time.Minute},
		OOMKills:                 ptr.To[int32](1),
		Restarts:                 ptr.To[int32](3),
		ThrottlingRatio:          "0.25",
		Cooldown:                 &metav1.Duration{Duration: 24 * time.Hour},
		RestoreTo:                v1alpha1.RestorePrevious,
		AdoptionThresholdPercent: 0,
		UnschedulableGrace:       &metav1.Duration{Duration: time.Minute},
		Backoff: v1alpha1.Backoff{
			TimePeriod:     &metav1.Duration{Duration: 10 * time.Minute},
			MultiplyByTurn: 1,
			MaxAttempts:    1,
		},
	}
}

// TestPolicyDefaultsAreApplied creates policies that leave the guardrails
// out at every level, as a user's YAML would, and checks that the apiserver
// fills in every default of the design.
func TestPolicyDefaultsAreApplied(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		kind string
		spec string
	}{
		{name: "no spec", kind: "RightsizingPolicy", spec: ""},
		{name: "empty spec", kind: "RightsizingPolicy", spec: `{}`},
		{name: "empty guardrails", kind: "RightsizingPolicy", spec: `guardrails: {}`},
		{name: "empty rollback", kind: "RightsizingPolicy", spec: `guardrails: {rollback: {}}`},
		{name: "empty backoff", kind: "RightsizingPolicy", spec: `guardrails: {rollback: {backoff: {}}}`},
		{name: "empty degraded", kind: "RightsizingPolicy", spec: `guardrails: {degraded: {}}`},
		{name: "cluster policy without spec", kind: "ClusterRightsizingPolicy", spec: ""},
		{name: "cluster policy with empty guardrails", kind: "ClusterRightsizingPolicy", spec: `guardrails: {}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := fromYAML(t, tc.kind, controlplane.UniqueName("defaults"), tc.spec)
			require.NoError(t, create(t, obj))

			var spec v1alpha1.PolicySpec
			if tc.kind == "ClusterRightsizingPolicy" {
				var got v1alpha1.ClusterRightsizingPolicy
				require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(obj), &got))
				spec = got.Spec
			} else {
				var got v1alpha1.RightsizingPolicy
				require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(obj), &got))
				spec = got.Spec
			}
			assert.Equal(t, int32(0), spec.Weight)
			assert.False(t, spec.Guardrails.Paused)
			assert.Empty(t, spec.Guardrails.FreezeWindows)
			assert.Equal(t, defaultedRollback(), spec.Guardrails.Rollback)
			if tc.name != "empty degraded" {
				assert.Nil(t, spec.Guardrails.Degraded, "absent means the defaults, and keeps the policy's fingerprint")
			}
			assert.Equal(t, v1alpha1.DegradedGuardrails{RolledBack: ptr.To[int32](3), Of: ptr.To[int32](5)}, spec.Guardrails.DegradedOrDefault())
		})
	}
}

// TestPolicyDefaultsKeepExplicitValues checks that defaulting fills only
// what is missing: explicit values, zeros included, stay as written.
func TestPolicyDefaultsKeepExplicitValues(t *testing.T) {
	obj := fromYAML(t, "RightsizingPolicy", controlplane.UniqueName("explicit"), `
weight: 7
guardrails:
  paused: true
  freezeWindows:
  - {schedule: "0 9 * * 1-5", duration: 8h}
  - {schedule: "30 22 * * *", duration: 90m, timeZone: Europe/Paris}
  rollback:
    oomKills: 0
    restarts: 0
    cooldown: "0"
    throttlingRatio: "1"
    backoff: {maxAttempts: 3}
`)
	require.NoError(t, create(t, obj))
	var got v1alpha1.RightsizingPolicy
	require.NoError(t, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKeyFromObject(obj), &got))

	want := defaultedRollback()
	want.OOMKills = ptr.To[int32](0)
	want.Restarts = ptr.To[int32](0)
	want.Cooldown = &metav1.Duration{}
	want.ThrottlingRatio = "1"
	want.Backoff.MaxAttempts = 3
	assert.Equal(t, want, got.Spec.Guardrails.Rollback)
	assert.Equal(t, int32(7), got.Spec.Weight)
	assert.True(t, got.Spec.Guardrails.Paused)
	assert.Equal(t, []v1alpha1.FreezeWindow{
		{Schedule: "0 9 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}, TimeZone: "UTC"},
		{Schedule: "30 22 * * *", Duration: metav1.Duration{Duration: 90 * time.Minute}, TimeZone: "Europe/Paris"},
	}, got.Spec.Guardrails.FreezeWindows)
}

// TestSetDefaultsMatchesTheAPIServer checks that PolicySpec.SetDefaults
// gives a spec built in Go the same values the apiserver gives a stored one.
func TestSetDefaultsMatchesTheAPIServer(t *testing.T) {
	ctx := context.Background()
	p := &v1alpha1.ClusterRightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Name: controlplane.UniqueName("godefaults")}}
	p.Spec.Guardrails.FreezeWindows = []v1alpha1.FreezeWindow{{Schedule: "0 0 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
	require.NoError(t, create(t, p))
	var got v1alpha1.ClusterRightsizingPolicy
	require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(p), &got))

	var local v1alpha1.PolicySpec
	local.Guardrails.FreezeWindows = []v1alpha1.FreezeWindow{{Schedule: "0 0 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
	local.SetDefaults()
	assert.Equal(t, got.Spec, local)
	assert.Equal(t, defaultedRollback(), local.Guardrails.Rollback)
}

// TestCanaryDurationDefaultsToTenMinutes: a canary that leaves its
// duration out gets 10m from the apiserver, as SetDefaults gives.
func TestCanaryDurationDefaultsToTenMinutes(t *testing.T) {
	ctx := context.Background()
	obj := fromYAML(t, "RightsizingPolicy", controlplane.UniqueName("canary"), `guardrails: {canary: {percent: 34}}`)
	require.NoError(t, create(t, obj))
	var got v1alpha1.RightsizingPolicy
	require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(obj), &got))
	require.NotNil(t, got.Spec.Guardrails.Canary)
	assert.Equal(t, &metav1.Duration{Duration: 10 * time.Minute}, got.Spec.Guardrails.Canary.Duration)
	assert.Equal(t, ptr.To[int32](34), got.Spec.Guardrails.Canary.Percent)

	local := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Canary: &v1alpha1.CanaryGuardrails{Percent: ptr.To[int32](34)}}}
	local.SetDefaults()
	assert.Equal(t, got.Spec.Guardrails.Canary, local.Guardrails.Canary)
}

// TestRecommendDefaultsAreApplied checks that an empty spec.recommend gets
// every default of docs/recommender.md from the apiserver, the same as
// SetDefaults gives, and that the recommender stays off.
func TestRecommendDefaultsAreApplied(t *testing.T) {
	ctx := context.Background()
	obj := fromYAML(t, "RightsizingPolicy", controlplane.UniqueName("recdefaults"), `recommend: {}`)
	require.NoError(t, create(t, obj))
	var got v1alpha1.RightsizingPolicy
	require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(obj), &got))
	want := v1alpha1.RecommendSpec{
		Strategy:            v1alpha1.StrategyInPlace,
		Interval:            &metav1.Duration{Duration: 5 * time.Minute},
		MinHistory:          &metav1.Duration{Duration: 24 * time.Hour},
		MinChangePercent:    ptr.To[int32](10),
		CPUPercentile:       ptr.To[int32](90),
		MemoryPercentile:    ptr.To[int32](90),
		SafetyMarginPercent: ptr.To[int32](15),
		KeepLimitProportion: ptr.To(false),
		Source:              v1alpha1.RecommendSourceKerf,

		LowerPercentile:    ptr.To[int32](50),
		UpperPercentile:    ptr.To[int32](95),
		ConfidenceInterval: &metav1.Duration{Duration: 24 * time.Hour},
		PodMinimum:         &v1alpha1.PodMinimum{CPU: ptr.To(resource.MustParse("25m")), Memory: ptr.To(resource.MustParse("250Mi"))},
		OOMBump:            &v1alpha1.OOMBump{Memory: ptr.To(resource.MustParse("100Mi")), Percent: ptr.To[int32](20)},
		CPUHalfLife:        &metav1.Duration{Duration: 24 * time.Hour},
		MemoryHalfLife:     &metav1.Duration{Duration: 24 * time.Hour},

		MemoryAggregationInterval:  &metav1.Duration{Duration: 24 * time.Hour},
		MemoryAggregationIntervals: ptr.To[int32](8),
	}
	require.NotNil(t, got.Spec.Recommend)
	assert.Equal(t, want, *got.Spec.Recommend)
	var local v1alpha1.RecommendSpec
	local.SetDefaults()
	assert.Equal(t, want, local)

	// A podMinimum or oomBump given in part gets the rest of its defaults.
	obj = fromYAML(t, "RightsizingPolicy", controlplane.UniqueName("recpart"), `recommend: {podMinimum: {memory: 100Mi}, oomBump: {percent: 50}}`)
	require.NoError(t, create(t, obj))
	require.NoError(t, controlplane.Get(t).Client.Get(ctx, client.ObjectKeyFromObject(obj), &got))
	assert.Equal(t, "25m", got.Spec.Recommend.PodMinimum.CPU.String())
	assert.Equal(t, "100Mi", got.Spec.Recommend.PodMinimum.Memory.String())
	assert.Equal(t, "100Mi", got.Spec.Recommend.OOMBump.Memory.String())
	assert.Equal(t, int32(50), *got.Spec.Recommend.OOMBump.Percent)
	local = v1alpha1.RecommendSpec{PodMinimum: &v1alpha1.PodMinimum{Memory: ptr.To(resource.MustParse("100Mi"))}, OOMBump: &v1alpha1.OOMBump{Percent: ptr.To[int32](50)}}
	local.SetDefaults()
	assert.Equal(t, *got.Spec.Recommend, local)
}

// TestAdmissionRefusesBadPolicies sends policies with one bad field each and
// checks that the apiserver refuses them with a message naming the field.
func TestAdmissionRefusesBadPolicies(t *testing.T) {
	const rb = "spec.guardrails.rollback."
	for _, tc := range []struct {
		name      string
		kind      string // RightsizingPolicy when empty
		spec      string
		wantField string
		wantMsg   string
	}{
		{"throttling ratio zero", "", `guardrails: {rollback: {throttlingRatio: "0"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio zero point zero", "", `guardrails: {rollback: {throttlingRatio: "0.000"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio above one", "", `guardrails: {rollback: {throttlingRatio: "1.5"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio just above one", "", `guardrails: {rollback: {throttlingRatio: "1.01"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio negative", "", `guardrails: {rollback: {throttlingRatio: "-0.1"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio not a number", "", `guardrails: {rollback: {throttlingRatio: "abc"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio percent", "", `guardrails: {rollback: {throttlingRatio: "25%"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"throttling ratio as a number", "", `guardrails: {rollback: {throttlingRatio: 0.25}}`, rb + "throttlingRatio", "string"},
		{"negative oom kills", "", `guardrails: {rollback: {oomKills: -1}}`, rb + "oomKills", "greater than or equal to 0"},
		{"negative restarts", "", `guardrails: {rollback: {restarts: -2}}`, rb + "restarts", "greater than or equal to 0"},
		{"max attempts zero", "", `guardrails: {rollback: {backoff: {maxAttempts: 0}}}`, rb + "backoff.maxAttempts", "greater than or equal to 1"},
		{"multiply by turn zero", "", `guardrails: {rollback: {backoff: {multiplyByTurn: 0}}}`, rb + "backoff.multiplyByTurn", "greater than or equal to 1"},
		{"adoption threshold above 100", "", `guardrails: {rollback: {adoptionThresholdPercent: 101}}`, rb + "adoptionThresholdPercent", "less than or equal to 100"},
		{"adoption threshold negative", "", `guardrails: {rollback: {adoptionThresholdPercent: -1}}`, rb + "adoptionThresholdPercent", "greater than or equal to 0"},
		{"watch duration unparsable", "", `guardrails: {rollback: {watchDuration: soon}}`, rb + "watchDuration", "positive duration"},
		{"watch duration without unit", "", `guardrails: {rollback: {watchDuration: "30"}}`, rb + "watchDuration", "positive duration"},
		{"watch duration zero", "", `guardrails: {rollback: {watchDuration: 0s}}`, rb + "watchDuration", "positive duration"},
		{"watch duration negative", "", `guardrails: {rollback: {watchDuration: -5m}}`, rb + "watchDuration", "positive duration"},
		{"watch duration in days", "", `guardrails: {rollback: {watchDuration: 1d}}`, rb + "watchDuration", "positive duration"},
		{"unschedulable grace zero", "", `guardrails: {rollback: {unschedulableGrace: 0s}}`, rb + "unschedulableGrace", "positive duration"},
		{"unschedulable grace negative", "", `guardrails: {rollback: {unschedulableGrace: -1m}}`, rb + "unschedulableGrace", "positive duration"},
		{"unschedulable grace without unit", "", `guardrails: {rollback: {unschedulableGrace: "60"}}`, rb + "unschedulableGrace", "positive duration"},
		{"cooldown unparsable", "", `guardrails: {rollback: {cooldown: one day}}`, rb + "cooldown", "duration such as 24h"},
		{"cooldown negative", "", `guardrails: {rollback: {cooldown: -1h}}`, rb + "cooldown", "duration such as 24h"},
		{"backoff time period unparsable", "", `guardrails: {rollback: {backoff: {timePeriod: 10 minutes}}}`, rb + "backoff.timePeriod", "positive duration"},
		{"backoff time period zero", "", `guardrails: {rollback: {backoff: {timePeriod: 0m}}}`, rb + "backoff.timePeriod", "positive duration"},
		{"unknown restore target", "", `guardrails: {rollback: {restoreTo: Yesterday}}`, rb + "restoreTo", `supported values: "Previous", "LastHealthy", "Manifest"`},
		{"negative weight", "", `weight: -1`, "spec.weight", "greater than or equal to 0"},
		{"workload kind kerf cannot manage", "", `selector: {kinds: [CronJob]}`, "spec.selector.kinds[0]", `supported values: "Deployment", "StatefulSet", "DaemonSet"`},
		{"freeze window cron with 4 fields", "", `guardrails: {freezeWindows: [{schedule: "0 9 * *", duration: 1h}]}`, "spec.guardrails.freezeWindows[0].schedule", "cron schedule of 5 space-separated fields"},
		{"freeze window cron with 6 fields", "", `guardrails: {freezeWindows: [{schedule: "0 0 9 * * *", duration: 1h}]}`, "spec.guardrails.freezeWindows[0].schedule", "cron schedule of 5 space-separated fields"},
		{"freeze window cron with garbage", "", `guardrails: {freezeWindows: [{schedule: "every monday", duration: 1h}]}`, "spec.guardrails.freezeWindows[0].schedule", "cron schedule of 5 space-separated fields"},
		{"freeze window without schedule", "", `guardrails: {freezeWindows: [{duration: 1h}]}`, "spec.guardrails.freezeWindows[0].schedule", "Required value"},
		{"freeze window duration unparsable", "", `guardrails: {freezeWindows: [{schedule: "0 9 * * *", duration: all day}]}`, "spec.guardrails.freezeWindows[0].duration", "positive duration"},
		{"freeze window without duration", "", `guardrails: {freezeWindows: [{schedule: "0 9 * * *"}]}`, "spec.guardrails.freezeWindows[0].duration", "Required value"},
		{"freeze window time zone not a name", "", `guardrails: {freezeWindows: [{schedule: "0 9 * * *", duration: 1h, timeZone: "+02:00"}]}`, "spec.guardrails.freezeWindows[0].timeZone", "IANA time zone"},
		{"freeze window time zone unknown", "", `guardrails: {freezeWindows: [{schedule: "0 9 * * *", duration: 1h, timeZone: Mars/Olympus_Mons}]}`, "spec.guardrails.freezeWindows[0].timeZone", "unknown time zone Mars/Olympus_Mons"},
		{"freeze window time zone Local", "", `guardrails: {freezeWindows: [{schedule: "0 9 * * *", duration: 1h, timeZone: Local}]}`, "spec.guardrails.freezeWindows[0].timeZone", "IANA time zone"},
		{"namespace selector on a namespaced policy", "", `selector: {namespaceSelector: {matchLabels: {team: a}}}`, "spec.selector.namespaceSelector", "selects only in its own namespace"},
		{"recommend interval zero", "", `recommend: {enabled: true, interval: 0s}`, "spec.recommend.interval", "duration of at least 1s"},
		{"recommend interval without unit", "", `recommend: {interval: "300"}`, "spec.recommend.interval", "duration of at least 1s"},
		{"recommend min history negative", "", `recommend: {minHistory: -1h}`, "spec.recommend.minHistory", "duration such as 24h"},
		{"recommend min change 100", "", `recommend: {minChangePercent: 100}`, "spec.recommend.minChangePercent", "less than or equal to 99"},
		{"recommend cpu percentile 100", "", `recommend: {cpuPercentile: 100}`, "spec.recommend.cpuPercentile", "less than or equal to 99"},
		{"recommend memory percentile zero", "", `recommend: {memoryPercentile: 0}`, "spec.recommend.memoryPercentile", "greater than or equal to 1"},
		{"recommend negative safety margin", "", `recommend: {safetyMarginPercent: -5}`, "spec.recommend.safetyMarginPercent", "greater than or equal to 0"},
		{"recommend unknown strategy", "", `recommend: {strategy: Sometime}`, "spec.recommend.strategy", `supported values: "InPlace", "Rollout", "Deferred"`},
		{"recommend upscale only of an unknown resource", "", `recommend: {upscaleOnly: [disk]}`, "spec.recommend.upscaleOnly[0]", `supported values: "cpu", "memory"`},
		{"recommend upscale only twice the same", "", `recommend: {upscaleOnly: [cpu, cpu]}`, "spec.recommend.upscaleOnly[1]", "Duplicate value"},
		{"recommend keep limit proportion not a bool", "", `recommend: {keepLimitProportion: "yes"}`, "spec.recommend.keepLimitProportion", "boolean"},
		{"recommend min cpu above max", "", `recommend: {containers: [{name: app, minAllowed: {cpu: "2"}, maxAllowed: {cpu: 500m}}]}`, "spec.recommend.containers[0].minAllowed.cpu", "must not be above maxAllowed.cpu (500m)"},
		{"recommend min memory above max", "", `recommend: {containers: [{name: "*", minAllowed: {memory: 1Gi}, maxAllowed: {memory: 512Mi}}]}`, "spec.recommend.containers[0].minAllowed.memory", "must not be above maxAllowed.memory (512Mi)"},
		{"recommend zero min cpu", "", `recommend: {containers: [{name: app, minAllowed: {cpu: "0"}}]}`, "spec.recommend.containers[0].minAllowed.cpu", "positive quantity"},
		{"recommend negative max memory", "", `recommend: {containers: [{name: app, maxAllowed: {memory: -1Gi}}]}`, "spec.recommend.containers[0].maxAllowed.memory", "positive quantity"},
		{"recommend min allowed empty", "", `recommend: {containers: [{name: app, minAllowed: {}}]}`, "spec.recommend.containers[0].minAllowed", "set cpu, memory or both"},
		{"recommend container without bounds", "", `recommend: {containers: [{name: app}]}`, "spec.recommend.containers[0]", "set minAllowed, maxAllowed or both"},
		{"recommend container name not a name", "", `recommend: {containers: [{name: App_1, minAllowed: {cpu: 10m}}]}`, "spec.recommend.containers[0].name", "container name"},
		{"recommend container named twice", "", `recommend: {containers: [{name: app, minAllowed: {cpu: 10m}}, {name: app, maxAllowed: {cpu: "1"}}]}`, "spec.recommend.containers[1]", "Duplicate value"},
		{"recommend too many containers", "", `recommend: {containers: [` + manyContainers(65) + `]}`, "spec.recommend.containers", "must have at most 64 items"},
		{"recommend quantity not a quantity", "", `recommend: {containers: [{name: app, maxAllowed: {cpu: lots}}]}`, "spec.recommend.containers[0].maxAllowed.cpu", "should match"},
		{"recommend lower percentile zero", "", `recommend: {lowerPercentile: 0}`, "spec.recommend.lowerPercentile", "greater than or equal to 1"},
		{"recommend upper percentile 100", "", `recommend: {upperPercentile: 100}`, "spec.recommend.upperPercentile", "less than or equal to 99"},
		{"recommend lower above upper", "", `recommend: {lowerPercentile: 96}`, "spec.recommend.lowerPercentile", "must not be above upperPercentile"},
		{"recommend confidence interval below a minute", "", `recommend: {confidenceInterval: 30s}`, "spec.recommend.confidenceInterval", "duration from 1m to 8760h"},
		{"recommend cpu half-life zero", "", `recommend: {cpuHalfLife: "0"}`, "spec.recommend.cpuHalfLife", "duration from 1m to 8760h"},
		{"recommend cpu half-life in days", "", `recommend: {cpuHalfLife: 2d}`, "spec.recommend.cpuHalfLife", "duration from 1m to 8760h"},
		{"recommend memory half-life above a year", "", `recommend: {memoryHalfLife: 9000h}`, "spec.recommend.memoryHalfLife", "duration from 1m to 8760h"},
		{"recommend memory interval below a minute", "", `recommend: {memoryAggregationInterval: 59s}`, "spec.recommend.memoryAggregationInterval", "duration from 1m to 8760h"},
		{"recommend memory intervals zero", "", `recommend: {memoryAggregationIntervals: 0}`, "spec.recommend.memoryAggregationIntervals", "greater than or equal to 1"},
		{"recommend memory intervals 256", "", `recommend: {memoryAggregationIntervals: 256}`, "spec.recommend.memoryAggregationIntervals", "less than or equal to 255"},
		{"recommend negative pod minimum cpu", "", `recommend: {podMinimum: {cpu: -1m}}`, "spec.recommend.podMinimum.cpu", "at least 0"},
		{"recommend negative pod minimum memory", "", `recommend: {podMinimum: {memory: -1Mi}}`, "spec.recommend.podMinimum.memory", "at least 0"},
		{"recommend pod minimum not a quantity", "", `recommend: {podMinimum: {memory: lots}}`, "spec.recommend.podMinimum.memory", "should match"},
		{"recommend negative oom bump memory", "", `recommend: {oomBump: {memory: -100Mi}}`, "spec.recommend.oomBump.memory", "at least 0"},
		{"recommend negative oom bump percent", "", `recommend: {oomBump: {percent: -1}}`, "spec.recommend.oomBump.percent", "greater than or equal to 0"},
		{"recommend oom bump percent above 1000", "", `recommend: {oomBump: {percent: 1001}}`, "spec.recommend.oomBump.percent", "less than or equal to 1000"},
		{"degraded rolled back zero", "", `guardrails: {degraded: {rolledBack: 0}}`, "spec.guardrails.degraded.rolledBack", "greater than or equal to 1"},
		{"degraded of zero", "", `guardrails: {degraded: {rolledBack: 1, of: 0}}`, "spec.guardrails.degraded.of", "greater than or equal to 1"},
		{"degraded of above the history's bound", "", `guardrails: {degraded: {of: 21}}`, "spec.guardrails.degraded.of", "less than or equal to 20"},
		{"degraded rolled back above of", "", `guardrails: {degraded: {rolledBack: 4, of: 3}}`, "spec.guardrails.degraded.rolledBack", "must not be above of"},
		{"degraded rolled back above the default of", "", `guardrails: {degraded: {rolledBack: 6}}`, "spec.guardrails.degraded.rolledBack", "must not be above of"},
		{"degraded disabled not a bool", "", `guardrails: {degraded: {disabled: "yes"}}`, "spec.guardrails.degraded.disabled", "boolean"},
		{"cluster policy with bad recommend interval", "ClusterRightsizingPolicy", `recommend: {interval: 500ms}`, "spec.recommend.interval", "duration of at least 1s"},
		{"cluster policy with bad ratio", "ClusterRightsizingPolicy", `guardrails: {rollback: {throttlingRatio: "2"}}`, rb + "throttlingRatio", "decimal string in (0, 1]"},
		{"canary with pods and percent", "", `guardrails: {canary: {pods: 1, percent: 10}}`, "spec.guardrails.canary", "set exactly one of pods and percent"},
		{"canary with neither pods nor percent", "", `guardrails: {canary: {duration: 10m}}`, "spec.guardrails.canary", "set exactly one of pods and percent"},
		{"canary of zero pods", "", `guardrails: {canary: {pods: 0}}`, "spec.guardrails.canary.pods", "spec.guardrails.canary.pods must be at least 1"},
		{"canary of zero percent", "", `guardrails: {canary: {percent: 0}}`, "spec.guardrails.canary.percent", "spec.guardrails.canary.percent must be between 1 and 100"},
		{"canary above 100 percent", "", `guardrails: {canary: {percent: 101}}`, "spec.guardrails.canary.percent", "spec.guardrails.canary.percent must be between 1 and 100"},
		{"canary duration zero", "", `guardrails: {canary: {pods: 1, duration: 0s}}`, "spec.guardrails.canary.duration", "spec.guardrails.canary.duration must be a positive duration"},
		{"canary duration in days", "", `guardrails: {canary: {pods: 1, duration: 1d}}`, "spec.guardrails.canary.duration", "spec.guardrails.canary.duration must be a positive duration"},
		{"cluster policy canary with both", "ClusterRightsizingPolicy", `guardrails: {canary: {pods: 2, percent: 50}}`, "spec.guardrails.canary", "set exactly one of pods and percent"},
		{"cluster policy with negative oom kills", "ClusterRightsizingPolicy", `guardrails: {rollback: {oomKills: -1}}`, rb + "oomKills", "greater than or equal to 0"},
		{"allow QoS change not a boolean", "", `guardrails: {allowQoSChange: "yes"}`, "spec.guardrails.allowQoSChange", "boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind := tc.kind
			if kind == "" {
				kind = "RightsizingPolicy"
			}
			err := create(t, fromYAML(t, kind, controlplane.UniqueName("bad"), tc.spec))
			require.Error(t, err, "the apiserver accepted a bad %s", kind)
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.wantField+":", "the message names the field")
			assert.Contains(t, err.Error(), tc.wantMsg)
			t.Log(err)
		})
	}
}

// TestAdmissionAcceptsGoodPolicyValues checks the edges of the rules from
// the allowed side: the validation is no stricter than the design.
func TestAdmissionAcceptsGoodPolicyValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind string // RightsizingPolicy when empty
		spec string
	}{
		{"throttling ratio one", "", `guardrails: {rollback: {throttlingRatio: "1"}}`},
		{"throttling ratio one point zero", "", `guardrails: {rollback: {throttlingRatio: "1.0"}}`},
		{"throttling ratio small", "", `guardrails: {rollback: {throttlingRatio: "0.001"}}`},
		{"zero counts turn signals off", "", `guardrails: {rollback: {oomKills: 0, restarts: 0}}`},
		{"compound durations", "", `guardrails: {rollback: {watchDuration: 1h30m, cooldown: 36h, unschedulableGrace: 1m30s, backoff: {timePeriod: 90s}}}`},
		{"fractional duration", "", `guardrails: {rollback: {watchDuration: 1.5h}}`},
		{"zero cooldown", "", `guardrails: {rollback: {cooldown: "0"}}`},
		{"zero cooldown with unit", "", `guardrails: {rollback: {cooldown: 0s}}`},
		{"adoption threshold 100", "", `guardrails: {rollback: {adoptionThresholdPercent: 100}}`},
		{"every restore target", "", `guardrails: {rollback: {restoreTo: LastHealthy}}`},
		{"cron with ranges, steps and names", "", `guardrails: {freezeWindows: [{schedule: "*/15 9-17 1,15 JAN-DEC MON-FRI", duration: 45m, timeZone: America/Argentina/Buenos_Aires}]}`},
		{"time zone with offset name", "", `guardrails: {freezeWindows: [{schedule: "0 0 * * 0", duration: 1h, timeZone: Etc/GMT+5}]}`},
		{"allow QoS change", "", `guardrails: {allowQoSChange: true}`},
		{"all workload kinds", "", `selector: {kinds: [Deployment, StatefulSet, DaemonSet], workloadSelector: {matchLabels: {app: web}}}`},
		{"recommend with short history", "", `recommend: {enabled: true, strategy: Rollout, interval: 1s, minHistory: 1s, minChangePercent: 0, cpuPercentile: 99, memoryPercentile: 1, safetyMarginPercent: 0}`},
		{"recommend zero history", "", `recommend: {minHistory: "0"}`},
		{"recommend guards", "", `recommend: {upscaleOnly: [memory, cpu], keepLimitProportion: false, containers: [{name: "*", minAllowed: {cpu: 10m, memory: 64Mi}, maxAllowed: {cpu: 2, memory: 4Gi}}, {name: app, minAllowed: {cpu: 1}, maxAllowed: {cpu: 1000m}}]}`},
		{"recommend 64 containers", "", `recommend: {containers: [` + manyContainers(64) + `]}`},
		{"recommend every model parameter", "", `recommend: {lowerPercentile: 1, upperPercentile: 1, confidenceInterval: 1m, podMinimum: {cpu: 0, memory: "0"}, oomBump: {memory: 0, percent: 0}, cpuHalfLife: 1m, memoryHalfLife: 8760h, memoryAggregationInterval: 1h30m, memoryAggregationIntervals: 255}`},
		{"recommend oom bump percent 1000", "", `recommend: {oomBump: {memory: 1Gi, percent: 1000}, podMinimum: {cpu: 1, memory: 1Gi}}`},
		{"degraded at its bounds", "", `guardrails: {degraded: {rolledBack: 20, of: 20}}`},
		{"degraded on the first rollback", "", `guardrails: {degraded: {rolledBack: 1, of: 1}}`},
		{"degraded turned off", "", `guardrails: {degraded: {disabled: true}}`},
		{"canary of one pod", "", `guardrails: {canary: {pods: 1}}`},
		{"canary of 100 percent for 90s", "", `guardrails: {canary: {percent: 100, duration: 90s}}`},
		{"namespace selector on a cluster policy", "ClusterRightsizingPolicy", `selector: {namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a, b]}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind := tc.kind
			if kind == "" {
				kind = "RightsizingPolicy"
			}
			assert.NoError(t, create(t, fromYAML(t, kind, controlplane.UniqueName("good"), tc.spec)))
		})
	}
}

// manyContainers is n entries of spec.recommend.containers, as YAML flow.
func manyContainers(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("{name: c%d, maxAllowed: {cpu: 1}}", i)
	}
	return strings.Join(parts, ", ")
}
