package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// nsPolicy is a RightsizingPolicy created age hours after epoch.
func nsPolicy(ns, name string, weight int32, age int, sel v1alpha1.PolicySelector) v1alpha1.RightsizingPolicy {
	return v1alpha1.RightsizingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Hour))},
		Spec:       v1alpha1.PolicySpec{Weight: weight, Selector: sel},
	}
}

// clusterPolicy is a ClusterRightsizingPolicy created age hours after epoch.
func clusterPolicy(name string, weight int32, age int, sel v1alpha1.PolicySelector) v1alpha1.ClusterRightsizingPolicy {
	return v1alpha1.ClusterRightsizingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Hour))},
		Spec:       v1alpha1.PolicySpec{Weight: weight, Selector: sel},
	}
}

// deleted marks a policy as being deleted.
func deleted[T any, P interface {
	*T
	SetDeletionTimestamp(*metav1.Time)
}](p T) T {
	now := metav1.NewTime(epoch)
	P(&p).SetDeletionTimestamp(&now)
	return p
}

var web = Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "web", Labels: map[string]string{"app": "web", "tier": "front"}}

func resolveCase(t *testing.T, w Workload, nsLabels map[string]string, namespaced []v1alpha1.RightsizingPolicy, cluster []v1alpha1.ClusterRightsizingPolicy, wantKind v1alpha1.PolicyKind, wantName string) {
	t.Helper()
	got, err := Resolve(w, nsLabels, namespaced, cluster)
	require.NoError(t, err)
	if wantName == "" {
		assert.Nil(t, got)
		return
	}
	require.NotNil(t, got)
	assert.Equal(t, wantKind, got.Ref.Kind)
	assert.Equal(t, wantName, got.Ref.Name)
}

func TestResolveChoosesHighestWeight(t *testing.T) {
	tests := []struct {
		name       string
		namespaced []v1alpha1.RightsizingPolicy
		cluster    []v1alpha1.ClusterRightsizingPolicy
		wantKind   v1alpha1.PolicyKind
		wantName   string
	}{
		{"cluster policy of higher weight beats namespaced",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 5, 0, v1alpha1.PolicySelector{})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("strict", 6, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindCluster, "strict"},
		{"namespaced policy of higher weight beats cluster",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 7, 5, v1alpha1.PolicySelector{})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 6, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindNamespaced, "p1"},
		{"weight beats age",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "old", 1, 0, v1alpha1.PolicySelector{}), nsPolicy("team-a", "new", 2, 9, v1alpha1.PolicySelector{})},
			nil, v1alpha1.PolicyKindNamespaced, "new"},
		{"weight zero still selects", nil,
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindCluster, "default"},
		{"no policy selects nothing", nil, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolveCase(t, web, nil, tt.namespaced, tt.cluster, tt.wantKind, tt.wantName)
		})
	}
}

func TestNamespacedBeatsClusterAtEqualWeight(t *testing.T) {
	tests := []struct {
		name      string
		nsAge     int
		clusterAg int
	}{
		{"namespaced newer than cluster", 10, 0},
		{"namespaced older than cluster", 0, 10},
		{"created together", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolveCase(t, web, nil,
				[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "zz", 4, tt.nsAge, v1alpha1.PolicySelector{})},
				[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("aa", 4, tt.clusterAg, v1alpha1.PolicySelector{})},
				v1alpha1.PolicyKindNamespaced, "zz")
		})
	}
}

func TestOldestWinsThenNameAtEqualWeightAndKind(t *testing.T) {
	tests := []struct {
		name     string
		cluster  []v1alpha1.ClusterRightsizingPolicy
		wantName string
	}{
		{"oldest wins whatever its name",
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("a-new", 1, 5, v1alpha1.PolicySelector{}), clusterPolicy("z-old", 1, 4, v1alpha1.PolicySelector{})},
			"z-old"},
		{"name breaks the tie between policies created in the same second",
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("b", 1, 5, v1alpha1.PolicySelector{}), clusterPolicy("a", 1, 5, v1alpha1.PolicySelector{}), clusterPolicy("c", 1, 5, v1alpha1.PolicySelector{})},
			"a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolveCase(t, web, nil, nil, tt.cluster, v1alpha1.PolicyKindCluster, tt.wantName)
			// The order the lister returns must not matter.
			rev := append([]v1alpha1.ClusterRightsizingPolicy(nil), tt.cluster...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			resolveCase(t, web, nil, nil, rev, v1alpha1.PolicyKindCluster, tt.wantName)
		})
	}
	t.Run("oldest namespaced policy wins", func(t *testing.T) {
		resolveCase(t, web, nil, []v1alpha1.RightsizingPolicy{
			nsPolicy("team-a", "a", 1, 2, v1alpha1.PolicySelector{}), nsPolicy("team-a", "b", 1, 1, v1alpha1.PolicySelector{}),
		}, nil, v1alpha1.PolicyKindNamespaced, "b")
	})
}

func TestResolveMatchesSelectors(t *testing.T) {
	appIn := func(values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: values}}}
	}
	prod := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	tests := []struct {
		name       string
		w          Workload
		nsLabels   map[string]string
		namespaced []v1alpha1.RightsizingPolicy
		cluster    []v1alpha1.ClusterRightsizingPolicy
		wantKind   v1alpha1.PolicyKind
		wantName   string
	}{
		{"namespaced policy applies only in its own namespace", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-b", "other", 9, 0, v1alpha1.PolicySelector{})},
			nil, "", ""},
		{"namespaced policy in the workload's namespace", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-b", "other", 9, 0, v1alpha1.PolicySelector{}), nsPolicy("team-a", "mine", 1, 0, v1alpha1.PolicySelector{})},
			nil, v1alpha1.PolicyKindNamespaced, "mine"},
		{"namespace selector matches namespace labels", web, map[string]string{"env": "prod"}, nil,
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("prod", 1, 0, v1alpha1.PolicySelector{NamespaceSelector: prod})},
			v1alpha1.PolicyKindCluster, "prod"},
		{"namespace selector rejects other namespaces", web, map[string]string{"env": "dev"}, nil,
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("prod", 9, 0, v1alpha1.PolicySelector{NamespaceSelector: prod}), clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindCluster, "default"},
		{"namespace selector with no namespace labels", web, nil, nil,
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("prod", 9, 0, v1alpha1.PolicySelector{NamespaceSelector: prod})},
			"", ""},
		{"namespace selector on a namespaced policy is ignored", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p", 1, 0, v1alpha1.PolicySelector{NamespaceSelector: prod})},
			nil, v1alpha1.PolicyKindNamespaced, "p"},
		{"workload selector matches", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "web", 1, 0, v1alpha1.PolicySelector{WorkloadSelector: appIn("web", "api")})},
			nil, v1alpha1.PolicyKindNamespaced, "web"},
		{"workload selector rejects", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "api", 9, 0, v1alpha1.PolicySelector{WorkloadSelector: appIn("api")})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindCluster, "default"},
		{"workload selector against a workload without labels", Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "bare"}, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "web", 1, 0, v1alpha1.PolicySelector{WorkloadSelector: appIn("web")})},
			nil, "", ""},
		{"empty selectors match everything", web, nil, nil,
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("all", 1, 0, v1alpha1.PolicySelector{NamespaceSelector: &metav1.LabelSelector{}, WorkloadSelector: &metav1.LabelSelector{}})},
			v1alpha1.PolicyKindCluster, "all"},
		{"kinds listing the workload's kind", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "deploys", 1, 0, v1alpha1.PolicySelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindStatefulSet, v1alpha1.KindDeployment}})},
			nil, v1alpha1.PolicyKindNamespaced, "deploys"},
		{"kinds not listing the workload's kind", web, nil,
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "sts", 9, 0, v1alpha1.PolicySelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindStatefulSet}})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("ds", 9, 0, v1alpha1.PolicySelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindDaemonSet}})},
			"", ""},
		{"deleted policies do not count", web, nil,
			[]v1alpha1.RightsizingPolicy{deleted(nsPolicy("team-a", "going", 9, 0, v1alpha1.PolicySelector{}))},
			[]v1alpha1.ClusterRightsizingPolicy{deleted(clusterPolicy("gone", 9, 0, v1alpha1.PolicySelector{})), clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			v1alpha1.PolicyKindCluster, "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resolveCase(t, tt.w, tt.nsLabels, tt.namespaced, tt.cluster, tt.wantKind, tt.wantName)
		})
	}
}

func TestResolvedCarriesDefaultedSpecAndFingerprint(t *testing.T) {
	p := nsPolicy("team-a", "p1", 3, 0, v1alpha1.PolicySelector{})
	p.Spec.Guardrails.FreezeWindows = []v1alpha1.FreezeWindow{{Schedule: "0 9 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
	got, err := Resolve(web, nil, []v1alpha1.RightsizingPolicy{p}, nil)
	require.NoError(t, err)
	require.NotNil(t, got)

	want := p.Spec.DeepCopy()
	want.SetDefaults()
	assert.Equal(t, *want, got.Spec)
	assert.Equal(t, "team-a", got.Namespace)
	assert.Equal(t, v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindNamespaced, Name: "p1", Fingerprint: Fingerprint(p.Spec)}, got.Ref)
	assert.Empty(t, p.Spec.Guardrails.FreezeWindows[0].TimeZone, "the lister's object must not be modified")
	assert.Nil(t, p.Spec.Guardrails.Rollback.WatchDuration, "the lister's object must not be modified")

	c, err := Resolve(web, nil, nil, []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})})
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Empty(t, c.Namespace)
}

func TestInvalidSelectorIsAnErrorNamingPolicyAndField(t *testing.T) {
	badOp := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Like", Values: []string{"web"}}}}
	noValues := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
	tests := []struct {
		name       string
		namespaced []v1alpha1.RightsizingPolicy
		cluster    []v1alpha1.ClusterRightsizingPolicy
		wantErr    string // empty: no error, and wantName wins
		wantName   string
	}{
		{"workload selector of a namespaced policy",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 1, 0, v1alpha1.PolicySelector{WorkloadSelector: badOp})},
			nil, `RightsizingPolicy team-a/p1: spec.selector.workloadSelector: "Like" is not a valid label selector operator`, ""},
		{"namespace selector of a cluster policy",
			nil, []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("c1", 1, 0, v1alpha1.PolicySelector{NamespaceSelector: noValues})},
			`ClusterRightsizingPolicy c1: spec.selector.namespaceSelector: `, ""},
		{"a broken policy above the winner blocks resolution",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 5, 0, v1alpha1.PolicySelector{WorkloadSelector: badOp})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			`RightsizingPolicy team-a/p1: spec.selector.workloadSelector:`, ""},
		{"a broken policy below the winner does not matter",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 0, 0, v1alpha1.PolicySelector{WorkloadSelector: badOp})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("strict", 5, 0, v1alpha1.PolicySelector{})},
			"", "strict"},
		{"a broken policy excluded by kinds does not matter",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-a", "p1", 5, 0, v1alpha1.PolicySelector{WorkloadSelector: badOp, Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindDaemonSet}})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			"", "default"},
		{"a broken policy in another namespace does not matter",
			[]v1alpha1.RightsizingPolicy{nsPolicy("team-b", "p1", 5, 0, v1alpha1.PolicySelector{WorkloadSelector: badOp})},
			[]v1alpha1.ClusterRightsizingPolicy{clusterPolicy("default", 0, 0, v1alpha1.PolicySelector{})},
			"", "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(web, nil, tt.namespaced, tt.cluster)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, got)
			assert.Equal(t, tt.wantName, got.Ref.Name)
		})
	}
}
