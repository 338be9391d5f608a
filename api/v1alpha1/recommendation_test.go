package v1alpha1_test

import (
	"context"
	"encoding/json"
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

const recommendationKind = "RightsizingRecommendation"

// TestAdmissionRefusesBadRecommendations sends recommendations with one bad
// field each and checks that the apiserver refuses them with a message
// naming the field.
func TestAdmissionRefusesBadRecommendations(t *testing.T) {
	const target = "targetRef: {kind: Deployment, name: web}\n"
	const inPlace = target + "strategy: InPlace\n"
	for _, tc := range []struct {
		name      string
		spec      string
		wantField string
		wantMsg   string
	}{
		{"unknown strategy", target + `strategy: Replace
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.strategy", `supported values: "InPlace", "Rollout", "Deferred"`},
		{"no strategy", target + `containers: [{name: app, requests: {cpu: 100m}}]`, "spec.strategy", "Required value"},
		{"target kind CronJob", `targetRef: {kind: CronJob, name: nightly}
strategy: Rollout
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.targetRef.kind", `supported values: "Deployment", "StatefulSet", "DaemonSet"`},
		{"target kind ReplicaSet", `targetRef: {kind: ReplicaSet, name: web-7d9f}
strategy: InPlace
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.targetRef.kind", `supported values: "Deployment", "StatefulSet", "DaemonSet"`},
		{"target API version not apps/v1", `targetRef: {apiVersion: apps/v1beta1, kind: Deployment, name: web}
strategy: InPlace
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.targetRef.apiVersion", `supported values: "apps/v1"`},
		{"target without name", `targetRef: {kind: Deployment}
strategy: InPlace
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.targetRef.name", "Required value"},
		{"no target", `strategy: InPlace
containers: [{name: app, requests: {cpu: 100m}}]`, "spec.targetRef", "Required value"},
		{"no containers", inPlace + `containers: []`, "spec.containers", "should have at least 1 items"},
		{"containers left out", inPlace, "spec.containers", "Required value"},
		{"container without name", inPlace + `containers: [{requests: {cpu: 100m}}]`, "spec.containers[0].name", "Required value"},
		{"not a container name", inPlace + `containers: [{name: App_1, requests: {cpu: 100m}}]`, "spec.containers[0].name", "must be a container name (lower-case letters, digits and '-') or (pod)"},
		{"a pod-level entry misspelt", inPlace + `containers: [{name: pod, requests: {cpu: 100m}}, {name: "(pods)", requests: {cpu: 100m}}]`, "spec.containers[1].name", "or (pod) for the pod-level resources"},
		{"same container twice", inPlace + `containers: [{name: app, requests: {cpu: 100m}}, {name: app, limits: {cpu: 1}}]`, "spec.containers[1]", "Duplicate value"},
		{"container with neither requests nor limits", inPlace + `containers: [{name: app}]`, "spec.containers[0]", "set requests, limits or both"},
		{"empty requests", inPlace + `containers: [{name: app, requests: {}}]`, "spec.containers[0].requests", "set cpu, memory or both"},
		{"empty limits", inPlace + `containers: [{name: app, requests: {cpu: 1}, limits: {}}]`, "spec.containers[0].limits", "set cpu, memory or both"},
		{"cpu limit below request", inPlace + `containers: [{name: app, requests: {cpu: 500m}, limits: {cpu: 250m}}]`, "spec.containers[0].limits.cpu", "must not be below requests.cpu"},
		{"cpu limit below integer request", inPlace + `containers: [{name: app, requests: {cpu: 2}, limits: {cpu: "1.5"}}]`, "spec.containers[0].limits.cpu", "must not be below requests.cpu"},
		{"memory limit below request in other units", inPlace + `containers: [{name: app, requests: {memory: 1Gi}, limits: {memory: 1000Mi}}]`, "spec.containers[0].limits.memory", "must not be below requests.memory"},
		{"memory limit below request in the second container", inPlace + `containers: [{name: app, requests: {cpu: 1}}, {name: sidecar, requests: {memory: 256Mi}, limits: {memory: 128Mi}}]`, "spec.containers[1].limits.memory", "must not be below requests.memory"},
		{"negative cpu request", inPlace + `containers: [{name: app, requests: {cpu: -100m}}]`, "spec.containers[0].requests.cpu", "must not be negative"},
		{"negative memory limit", inPlace + `containers: [{name: app, limits: {memory: -1Gi}}]`, "spec.containers[0].limits.memory", "must not be negative"},
		{"not a quantity", inPlace + `containers: [{name: app, requests: {memory: lots}}]`, "spec.containers[0].requests.memory", "should match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(t, fromYAML(t, recommendationKind, controlplane.UniqueName("bad"), tc.spec))
			require.Error(t, err, "the apiserver accepted a bad recommendation")
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.wantField+":", "the message names the field")
			assert.Contains(t, err.Error(), tc.wantMsg)
			t.Log(err)
		})
	}
}

// TestAdmissionAcceptsGoodRecommendations checks the edges of the rules
// from the allowed side, and the defaults of targetRef and hpa.
func TestAdmissionAcceptsGoodRecommendations(t *testing.T) {
	const target = "targetRef: {kind: StatefulSet, name: db}\n"
	for _, tc := range []struct {
		name string
		spec string
	}{
		{"limits equal requests in other units", target + `strategy: Rollout
containers: [{name: app, requests: {cpu: "0.5", memory: 1Gi}, limits: {cpu: 500m, memory: 1024Mi}}]`},
		{"integer quantities", target + `strategy: InPlace
containers: [{name: app, requests: {cpu: 1, memory: 1073741824}, limits: {cpu: 2}}]`},
		{"only limits", target + `strategy: Deferred
containers: [{name: app, limits: {memory: 512Mi}}]`},
		{"zero request", target + `strategy: InPlace
containers: [{name: app, requests: {cpu: "0"}}]`},
		{"several containers", target + `strategy: InPlace
containers: [{name: app, requests: {cpu: 1}}, {name: sidecar, limits: {memory: 64Mi}}]`},
		{"the pod-level entry", target + `strategy: InPlace
containers: [{name: app, requests: {cpu: 1}}, {name: (pod), limits: {memory: 1Gi}}]`},
		{"every workload kind", `targetRef: {apiVersion: apps/v1, kind: DaemonSet, name: agent}
strategy: Rollout
containers: [{name: agent, requests: {memory: 100Mi}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NoError(t, create(t, fromYAML(t, recommendationKind, controlplane.UniqueName("good"), tc.spec)))
		})
	}

	t.Run("defaults", func(t *testing.T) {
		obj := fromYAML(t, recommendationKind, controlplane.UniqueName("defaults"), target+`strategy: InPlace
containers: [{name: app, requests: {cpu: 1}}]
hpa: {}`)
		require.NoError(t, create(t, obj))
		var got v1alpha1.RightsizingRecommendation
		require.NoError(t, controlplane.Get(t).Client.Get(context.Background(), client.ObjectKeyFromObject(obj), &got))
		assert.Equal(t, "apps/v1", got.Spec.TargetRef.APIVersion)
		require.NotNil(t, got.Spec.HPA)
		assert.True(t, got.Spec.HPA.Coordinate, "hpa.coordinate defaults to true")
		assert.Empty(t, got.Spec.HPA.Name)
	})
}

// fullRecommendation returns a recommendation with every spec and status
// field set.
func fullRecommendation(name string) *v1alpha1.RightsizingRecommendation {
	q := resource.MustParse
	t0 := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(t0.Add(3 * time.Minute))
	values := func(cpu, mem string) *v1alpha1.ResourceValues {
		return &v1alpha1.ResourceValues{CPU: ptr.To(q(cpu)), Memory: ptr.To(q(mem))}
	}
	previous := v1alpha1.Resources{Requests: values("500m", "256Mi"), Limits: values("1", "512Mi")}
	applied := v1alpha1.Resources{Requests: values("250m", "128Mi"), Limits: values("1", "256Mi")}
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:  v1alpha1.StrategyInPlace,
			Containers: []v1alpha1.ContainerResources{
				{Name: "app", Requests: applied.Requests, Limits: applied.Limits},
				{Name: "sidecar", Requests: &v1alpha1.ResourceValues{Memory: ptr.To(q("64Mi"))}},
			},
			HPA: &v1alpha1.HPACoordination{Coordinate: false, Name: "web"},
		},
		Status: v1alpha1.RightsizingRecommendationStatus{
			Phase:              v1alpha1.PhaseRolledBack,
			Reason:             v1alpha1.HealthWatchOOMKills,
			Message:            "memory rolled back after 2 OOM kills",
			ObservedGeneration: 1,
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: "Applied", Message: "resized 2 pods", LastTransitionTime: t0, ObservedGeneration: 1},
				{Type: v1alpha1.ConditionHealthWatch, Status: metav1.ConditionFalse, Reason: v1alpha1.HealthWatchOOMKills, Message: "oomKills 2 ≥ 1", LastTransitionTime: later, ObservedGeneration: 1},
			},
			Policy: &v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindCluster, Name: "default", Fingerprint: "p-1"},
			Change: &v1alpha1.Change{
				AppliedAt:  t0,
				Strategy:   v1alpha1.StrategyInPlace,
				Resources:  []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory},
				Containers: []v1alpha1.ContainerChange{{Name: "app", Previous: previous, Applied: applied}},
				Touched: []v1alpha1.TouchedObject{
					{Kind: "Pod", Name: "web-1", Namespace: testNamespace, ResourceVersion: "42"},
					{Kind: "HorizontalPodAutoscaler", Name: "web", ResourceVersion: "43"},
				},
				HPA:               &v1alpha1.HPAChange{Name: "web", PreviousTargetCPUUtilization: 60, AppliedTargetCPUUtilization: 120},
				ValueFingerprint:  "v-1",
				PolicyFingerprint: "p-1",
				ThrottlingBaselines: []v1alpha1.ThrottlingBaseline{
					{Pod: "web-1", PodUID: "0b6d3c1e-1f4a-4c3e-9a51-1c2d3e4f5a6b", Container: "app", Periods: 1200, Throttled: 30, At: later},
				},
			},
			LastHealthy: &v1alpha1.HealthyValues{
				At:               t0,
				ValueFingerprint: "v-0",
				Containers:       []v1alpha1.ContainerResources{{Name: "app", Requests: previous.Requests, Limits: previous.Limits}},
			},
			Rollback: &v1alpha1.RollbackState{
				State:       v1alpha1.BackoffBackingOff,
				Turn:        1,
				Expiry:      ptr.To(metav1.NewTime(later.Add(10 * time.Minute))),
				Fingerprint: "v-1",
				Turns: []v1alpha1.BackoffTurn{
					{Turn: 1, StartedAt: t0, EndedAt: &later, Outcome: "RolledBack", Reason: v1alpha1.HealthWatchOOMKills},
				},
			},
			Cooldowns:              []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(later.Add(24 * time.Hour))}},
			RolledBackFingerprints: []string{"v-1"},
			History: []v1alpha1.Action{
				{Time: t0, Type: v1alpha1.ActionApplied, Reason: "Applied", Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory},
					Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: previous, New: applied}}},
				{Time: later, Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Message: "memory restored",
					Resources:  []v1alpha1.ResourceName{v1alpha1.ResourceMemory},
					Containers: []v1alpha1.ContainerValueChange{{Name: "app", Old: applied, New: previous}},
					Figures:    []string{"oomKills 2 ≥ 1"}},
			},
		},
	}
}

// mustJSON renders v as JSON, the form the apiserver stores, so values that
// differ only in Go representation (a time's location, a quantity's cached
// string) compare equal.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestRecommendationRoundTrips writes a recommendation with every field set,
// spec through the object and status through the status subresource, and
// reads back the same values.
func TestRecommendationRoundTrips(t *testing.T) {
	ctx := context.Background()
	c := controlplane.Get(t).Client
	want := fullRecommendation(controlplane.UniqueName("full"))

	obj := want.DeepCopy()
	require.NoError(t, c.Create(ctx, obj))
	assert.Empty(t, obj.Status.Phase, "status is a subresource: a create does not write it")

	obj.Status = *want.Status.DeepCopy()
	require.NoError(t, c.Status().Update(ctx, obj))

	var got v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), &got))
	assert.JSONEq(t, mustJSON(t, want.Spec), mustJSON(t, got.Spec))
	assert.JSONEq(t, mustJSON(t, want.Status), mustJSON(t, got.Status))
	assert.Equal(t, int64(1), got.Generation)

	// A spec update does not touch the status, and bumps the generation.
	got.Spec.Strategy = v1alpha1.StrategyRollout
	got.Status.Phase = v1alpha1.PhaseFailed
	require.NoError(t, c.Update(ctx, &got))
	var again v1alpha1.RightsizingRecommendation
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), &again))
	assert.Equal(t, v1alpha1.StrategyRollout, again.Spec.Strategy)
	assert.Equal(t, v1alpha1.PhaseRolledBack, again.Status.Phase)
	assert.Equal(t, int64(2), again.Generation)
}

// TestAdmissionRefusesBadRecommendationStatus checks that the status
// schema holds too: the leader cannot write a phase or backoff state the
// design does not have.
func TestAdmissionRefusesBadRecommendationStatus(t *testing.T) {
	ctx := context.Background()
	c := controlplane.Get(t).Client
	obj := fullRecommendation(controlplane.UniqueName("status"))
	obj.Status = v1alpha1.RightsizingRecommendationStatus{}
	require.NoError(t, c.Create(ctx, obj))

	for _, tc := range []struct {
		name      string
		status    v1alpha1.RightsizingRecommendationStatus
		wantField string
	}{
		{"unknown phase", v1alpha1.RightsizingRecommendationStatus{Phase: "Sleeping"}, "status.phase"},
		{"unknown backoff state", v1alpha1.RightsizingRecommendationStatus{Rollback: &v1alpha1.RollbackState{State: "waiting"}}, "status.rollback.state"},
		{"unknown action type", v1alpha1.RightsizingRecommendationStatus{History: []v1alpha1.Action{{Time: metav1.Now(), Type: "resized"}}}, "status.history[0].type"},
		{"unknown cooldown resource", v1alpha1.RightsizingRecommendationStatus{Cooldowns: []v1alpha1.Cooldown{{Resource: "gpu", Until: metav1.Now()}}}, "status.cooldowns[0].resource"},
		{"history over 100 actions", v1alpha1.RightsizingRecommendationStatus{History: make([]v1alpha1.Action, 101)}, "status.history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.status.History {
				if tc.status.History[i].Type == "" {
					tc.status.History[i] = v1alpha1.Action{Time: metav1.Now(), Type: v1alpha1.ActionHealthy}
				}
			}
			bad := obj.DeepCopy()
			bad.Status = tc.status
			err := c.Status().Update(ctx, bad)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.wantField+":", "the message names the field")
			t.Log(err)
		})
	}
}
