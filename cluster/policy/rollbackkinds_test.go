package policy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// rbPolicy is a RollbackPolicy created age hours after epoch.
func rbPolicy(ns, name string, weight int32, age int, sel v1alpha1.PolicySelector) v1alpha1.RollbackPolicy {
	return v1alpha1.RollbackPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Hour))},
		Spec:       v1alpha1.RollbackPolicySpec{Weight: weight, Selector: sel},
	}
}

// clusterRbPolicy is a ClusterRollbackPolicy created age hours after epoch.
func clusterRbPolicy(name string, weight int32, age int, sel v1alpha1.PolicySelector) v1alpha1.ClusterRollbackPolicy {
	return v1alpha1.ClusterRollbackPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Hour))},
		Spec:       v1alpha1.RollbackPolicySpec{Weight: weight, Selector: sel},
	}
}

// TestFromRollbackPolicyMapsTheDesignsFields: each field of the backoff
// design lands on the guardrail it names, and the result fingerprints as
// the RightsizingPolicy spec written with Kerf's names does.
func TestFromRollbackPolicyMapsTheDesignsFields(t *testing.T) {
	backoff := v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 5 * time.Minute}, MultiplyByTurn: 2, MaxAttempts: 3}
	sel := v1alpha1.PolicySelector{WorkloadSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	got := FromRollbackPolicy(&v1alpha1.RollbackPolicySpec{
		Selector: sel, Weight: 4,
		MonitoringPeriod: &metav1.Duration{Duration: 15 * time.Minute}, RollbackTarget: v1alpha1.RollbackTargetManifest,
		AdoptionThreshold: 80, Backoff: backoff,
		OOMKills: ptr.To[int32](2), Restarts: ptr.To[int32](0), ThrottlingRatio: "0.5", Cooldown: &metav1.Duration{Duration: time.Hour},
	})
	want := v1alpha1.PolicySpec{Selector: sel, Weight: 4, Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{
		WatchDuration: &metav1.Duration{Duration: 15 * time.Minute}, RestoreTo: v1alpha1.RestoreManifest,
		AdoptionThresholdPercent: 80, Backoff: backoff,
		OOMKills: ptr.To[int32](2), Restarts: ptr.To[int32](0), ThrottlingRatio: "0.5", Cooldown: &metav1.Duration{Duration: time.Hour},
	}}}
	assert.Equal(t, want, got)
	assert.Equal(t, Fingerprint(want), Fingerprint(got))

	for target, restore := range map[v1alpha1.RollbackTarget]v1alpha1.RestoreTarget{
		"":                                    v1alpha1.RestoreLastHealthy,
		v1alpha1.RollbackTargetLastSuccessful: v1alpha1.RestoreLastHealthy,
		v1alpha1.RollbackTargetManifest:       v1alpha1.RestoreManifest,
	} {
		assert.Equal(t, restore, FromRollbackPolicy(&v1alpha1.RollbackPolicySpec{RollbackTarget: target}).Guardrails.Rollback.RestoreTo, "rollbackTarget %q", target)
	}
	// Left out, every field takes the guardrails' default, except the
	// restore target: the design's default is the last successful values.
	empty := FromRollbackPolicy(&v1alpha1.RollbackPolicySpec{})
	empty.SetDefaults()
	defaults := v1alpha1.PolicySpec{}
	defaults.SetDefaults()
	defaults.Guardrails.Rollback.RestoreTo = v1alpha1.RestoreLastHealthy
	assert.Equal(t, defaults, empty)
}

// TestResolveRanksTheRollbackKinds: where policies of the four kinds
// select one workload, weight wins, then a namespaced policy, then Kerf's
// own kind, then the oldest.
func TestResolveRanksTheRollbackKinds(t *testing.T) {
	prod := map[string]string{"env": "prod"}
	byProd := v1alpha1.PolicySelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: prod}}
	all := v1alpha1.PolicySelector{}
	for _, tc := range []struct {
		name            string
		nsLabels        map[string]string
		namespaced      []v1alpha1.RightsizingPolicy
		cluster         []v1alpha1.ClusterRightsizingPolicy
		rollback        []v1alpha1.RollbackPolicy
		clusterRollback []v1alpha1.ClusterRollbackPolicy
		wantKind        v1alpha1.PolicyKind
		wantName        string
	}{
		{name: "a namespaced RollbackPolicy beats the shipped default",
			cluster:  []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, all)},
			rollback: []v1alpha1.RollbackPolicy{rbPolicy("team-a", "checkout", 0, 9, all)},
			wantKind: v1alpha1.PolicyKindRollback, wantName: "checkout"},
		{name: "a RightsizingPolicy beats an older RollbackPolicy of equal weight",
			namespaced: []v1alpha1.RightsizingPolicy{nsPolicy("team-a", "guard", 3, 9, all)},
			rollback:   []v1alpha1.RollbackPolicy{rbPolicy("team-a", "checkout", 3, 0, all)},
			wantKind:   v1alpha1.PolicyKindNamespaced, wantName: "guard"},
		{name: "a ClusterRightsizingPolicy beats an older ClusterRollbackPolicy of equal weight",
			cluster:         []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 9, all)},
			clusterRollback: []v1alpha1.ClusterRollbackPolicy{clusterRbPolicy("design", 0, 0, all)},
			wantKind:        v1alpha1.PolicyKindCluster, wantName: "default"},
		{name: "a RollbackPolicy of higher weight beats a RightsizingPolicy",
			namespaced: []v1alpha1.RightsizingPolicy{nsPolicy("team-a", "guard", 3, 0, all)},
			rollback:   []v1alpha1.RollbackPolicy{rbPolicy("team-a", "checkout", 4, 9, all)},
			wantKind:   v1alpha1.PolicyKindRollback, wantName: "checkout"},
		{name: "a RollbackPolicy beats a ClusterRightsizingPolicy of equal weight, scope before kind",
			cluster:  []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("strict", 5, 0, all)},
			rollback: []v1alpha1.RollbackPolicy{rbPolicy("team-a", "checkout", 5, 9, all)},
			wantKind: v1alpha1.PolicyKindRollback, wantName: "checkout"},
		{name: "a RollbackPolicy beats a ClusterRollbackPolicy of equal weight",
			rollback:        []v1alpha1.RollbackPolicy{rbPolicy("team-a", "checkout", 1, 9, all)},
			clusterRollback: []v1alpha1.ClusterRollbackPolicy{clusterRbPolicy("design", 1, 0, all)},
			wantKind:        v1alpha1.PolicyKindRollback, wantName: "checkout"},
		{name: "the older of two RollbackPolicies",
			rollback: []v1alpha1.RollbackPolicy{rbPolicy("team-a", "new", 0, 9, all), rbPolicy("team-a", "old", 0, 1, all)},
			wantKind: v1alpha1.PolicyKindRollback, wantName: "old"},
		{name: "a ClusterRollbackPolicy selects by namespace label", nsLabels: prod,
			cluster:         []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, all)},
			clusterRollback: []v1alpha1.ClusterRollbackPolicy{clusterRbPolicy("prod", 10, 0, byProd)},
			wantKind:        v1alpha1.PolicyKindClusterRollback, wantName: "prod"},
		{name: "a ClusterRollbackPolicy does not select a namespace without the label",
			cluster:         []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, all)},
			clusterRollback: []v1alpha1.ClusterRollbackPolicy{clusterRbPolicy("prod", 10, 0, byProd)},
			wantKind:        v1alpha1.PolicyKindCluster, wantName: "default"},
		{name: "never another namespace's RollbackPolicy",
			rollback: []v1alpha1.RollbackPolicy{rbPolicy("team-b", "checkout", 9, 0, all)}},
		{name: "a RollbackPolicy being deleted does not count",
			cluster:  []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, all)},
			rollback: []v1alpha1.RollbackPolicy{deleted(rbPolicy("team-a", "checkout", 9, 0, all))},
			wantKind: v1alpha1.PolicyKindCluster, wantName: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policies{
				namespaces:      map[string]map[string]string{web.Namespace: tc.nsLabels},
				namespaced:      map[string][]v1alpha1.RightsizingPolicy{web.Namespace: tc.namespaced},
				cluster:         tc.cluster,
				rollback:        map[string][]v1alpha1.RollbackPolicy{web.Namespace: tc.rollback},
				clusterRollback: tc.clusterRollback,
			}
			got, err := p.Resolve(web)
			require.NoError(t, err)
			if tc.wantName == "" {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tc.wantKind, got.Ref.Kind)
			assert.Equal(t, tc.wantName, got.Ref.Name)
			if tc.wantKind.Namespaced() {
				assert.Equal(t, web.Namespace, got.Namespace)
			} else {
				assert.Empty(t, got.Namespace)
			}
		})
	}
}

// TestResolveNamesABrokenRollbackPolicy: a RollbackPolicy whose selector
// does not parse, ranked above the winner, is an error naming its kind and
// field, and nothing is chosen.
func TestResolveNamesABrokenRollbackPolicy(t *testing.T) {
	broken := rbPolicy("team-a", "broken", 5, 0, v1alpha1.PolicySelector{WorkloadSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}})
	p := &Policies{
		cluster:  []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
		rollback: map[string][]v1alpha1.RollbackPolicy{"team-a": {broken}},
	}
	got, err := p.Resolve(web)
	require.Error(t, err)
	assert.Nil(t, got)
	assert.Contains(t, err.Error(), "RollbackPolicy team-a/broken: spec.selector.workloadSelector")
}

// TestGathererReadsTheRollbackKinds: read for a namespace or for all, the
// Gatherer brings the RollbackPolicies and ClusterRollbackPolicies to
// Resolve, their spec turned into the guardrails.
func TestGathererReadsTheRollbackKinds(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	checkout := rbPolicy("team-a", "checkout", 0, 0, v1alpha1.PolicySelector{})
	checkout.Spec.MonitoringPeriod = &metav1.Duration{Duration: 7 * time.Minute}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"env": "prod"}}},
		ptrTo(clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})),
		&checkout,
		ptrTo(clusterRbPolicy("prod", 1, 0, v1alpha1.PolicySelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}})),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	ctx := context.Background()
	all, err := Gatherer{Reader: c}.All(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		ns       string
		wantKind v1alpha1.PolicyKind
		wantName string
	}{
		{"team-a", v1alpha1.PolicyKindRollback, "checkout"},
		{"team-b", v1alpha1.PolicyKindClusterRollback, "prod"},
	} {
		one, err := Gatherer{Reader: c}.InNamespace(ctx, tc.ns)
		require.NoError(t, err)
		for name, p := range map[string]*Policies{"InNamespace": one, "All": all} {
			got, err := p.Resolve(Workload{Kind: v1alpha1.KindDeployment, Namespace: tc.ns, Name: "web"})
			require.NoError(t, err, name)
			require.NotNil(t, got, name)
			assert.Equal(t, tc.wantKind, got.Ref.Kind, name)
			assert.Equal(t, tc.wantName, got.Ref.Name, name)
			if tc.wantName == "checkout" {
				assert.Equal(t, 7*time.Minute, got.Spec.Guardrails.Rollback.WatchDuration.Duration, name)
				assert.Equal(t, v1alpha1.RestoreLastHealthy, got.Spec.Guardrails.Rollback.RestoreTo, name)
			}
		}
	}
	assert.False(t, all.AnyRecommends(), "the rollback kinds have no recommender")
}
