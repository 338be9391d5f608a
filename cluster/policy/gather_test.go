package policy

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// gatherFixture is two namespaces, team-a labelled env=prod, with a
// RightsizingPolicy each and two ClusterRightsizingPolicies: one for
// env=prod namespaces, one for every namespace at a lower weight.
func gatherFixture(t *testing.T, funcs interceptor.Funcs) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	prod := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"env": "prod"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		ptrTo(nsPolicy("team-a", "web-only", 20, 0, v1alpha1.PolicySelector{WorkloadSelector: web})),
		ptrTo(nsPolicy("team-b", "everything", 5, 0, v1alpha1.PolicySelector{})),
		ptrTo(clusterPolicy("prod", 10, 0, v1alpha1.PolicySelector{NamespaceSelector: prod})),
		ptrTo(clusterPolicy("default", 1, 0, v1alpha1.PolicySelector{})),
	}
	recommending := clusterPolicy("recommending", 0, 0, v1alpha1.PolicySelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindDaemonSet}})
	recommending.Spec.Recommend = &v1alpha1.RecommendSpec{Enabled: true}
	objs = append(objs, &recommending)
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build(), funcs)
}

func ptrTo[T any](v T) *T { return &v }

// TestGathererReadsWhatResolveNeeds: the policies a Gatherer reads choose
// as Resolve does, by weight, selectors and namespace labels, whether read
// for one namespace or for all.
func TestGathererReadsWhatResolveNeeds(t *testing.T) {
	c := gatherFixture(t, interceptor.Funcs{})
	ctx := context.Background()
	all, err := Gatherer{Reader: c}.All(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		w        Workload
		wantKind v1alpha1.PolicyKind
		wantName string
	}{
		{"its namespace's policy, when it selects the workload", Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "web", Labels: map[string]string{"app": "web"}},
			v1alpha1.PolicyKindNamespaced, "web-only"},
		{"the cluster policy for its namespace's labels", Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "api"},
			v1alpha1.PolicyKindCluster, "prod"},
		{"never another namespace's policy", Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-b", Name: "web", Labels: map[string]string{"app": "web"}},
			v1alpha1.PolicyKindNamespaced, "everything"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one, err := Gatherer{Reader: c}.InNamespace(ctx, tc.w.Namespace)
			require.NoError(t, err)
			for name, p := range map[string]*Policies{"InNamespace": one, "All": all} {
				got, err := p.Resolve(tc.w)
				require.NoError(t, err, name)
				require.NotNil(t, got, name)
				assert.Equal(t, tc.wantKind, got.Ref.Kind, name)
				assert.Equal(t, tc.wantName, got.Ref.Name, name)
			}
		})
	}

	// Read for team-b, a workload of team-a is judged without its
	// namespace's labels and policies.
	b, err := Gatherer{Reader: c}.InNamespace(ctx, "team-b")
	require.NoError(t, err)
	got, err := b.Resolve(Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "web", Labels: map[string]string{"app": "web"}})
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, "default", got.Ref.Name)
	assert.True(t, all.AnyRecommends(), "the recommending ClusterRightsizingPolicy")
}

// TestResolveSharedResolvesAsResolveOncePerPolicy: the workloads one
// policy governs share one Resolved, equal to what Resolve makes for each;
// another policy's workloads get their own.
func TestResolveSharedResolvesAsResolveOncePerPolicy(t *testing.T) {
	c := gatherFixture(t, interceptor.Funcs{})
	all, err := Gatherer{Reader: c}.All(t.Context())
	require.NoError(t, err)
	api := Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "api"}
	db := Workload{Kind: v1alpha1.KindStatefulSet, Namespace: "team-a", Name: "db"}
	web := Workload{Kind: v1alpha1.KindDeployment, Namespace: "team-a", Name: "web", Labels: map[string]string{"app": "web"}}
	first, err := all.ResolveShared(api)
	require.NoError(t, err)
	again, err := all.ResolveShared(db)
	require.NoError(t, err)
	assert.Same(t, first, again, "both are governed by ClusterRightsizingPolicy prod")
	want, err := all.Resolve(db)
	require.NoError(t, err)
	assert.Equal(t, want, again)
	other, err := all.ResolveShared(web)
	require.NoError(t, err)
	assert.Equal(t, "web-only", other.Ref.Name)
	none, err := all.ResolveShared(Workload{Kind: v1alpha1.KindDeployment, Namespace: "elsewhere", Name: "x"})
	require.NoError(t, err)
	assert.Equal(t, "default", none.Ref.Name)

	// Policies made by hand share nothing, and still resolve.
	byHand := &Policies{cluster: []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("only", 0, 0, v1alpha1.PolicySelector{})}}
	a, err := byHand.ResolveShared(api)
	require.NoError(t, err)
	b, err := byHand.ResolveShared(db)
	require.NoError(t, err)
	assert.NotSame(t, a, b)
	assert.Equal(t, a, b)
}

// TestAnyRecommendsLooksAtEveryPolicy: one policy of either kind that
// enables spec.recommend is enough; one that sets it disabled is not.
func TestAnyRecommendsLooksAtEveryPolicy(t *testing.T) {
	on, off := &v1alpha1.RecommendSpec{Enabled: true}, &v1alpha1.RecommendSpec{}
	withRecommend := func(np v1alpha1.RightsizingPolicy, r *v1alpha1.RecommendSpec) v1alpha1.RightsizingPolicy {
		np.Spec.Recommend = r
		return np
	}
	clusterWith := func(cp v1alpha1.ClusterRightsizingPolicy, r *v1alpha1.RecommendSpec) v1alpha1.ClusterRightsizingPolicy {
		cp.Spec.Recommend = r
		return cp
	}
	for _, tc := range []struct {
		name string
		p    Policies
		want bool
	}{
		{"no policy", Policies{}, false},
		{"none sets it", Policies{cluster: []v1alpha1.ClusterRightsizingPolicy{clusterPolicy("a", 0, 0, v1alpha1.PolicySelector{})}}, false},
		{"set but disabled", Policies{cluster: []v1alpha1.ClusterRightsizingPolicy{clusterWith(clusterPolicy("a", 0, 0, v1alpha1.PolicySelector{}), off)}}, false},
		{"a cluster policy", Policies{cluster: []v1alpha1.ClusterRightsizingPolicy{clusterWith(clusterPolicy("a", 0, 0, v1alpha1.PolicySelector{}), on)}}, true},
		{"a namespaced policy", Policies{namespaced: map[string][]v1alpha1.RightsizingPolicy{
			"team-a": {nsPolicy("team-a", "x", 0, 0, v1alpha1.PolicySelector{})},
			"team-b": {withRecommend(nsPolicy("team-b", "y", 0, 0, v1alpha1.PolicySelector{}), on)},
		}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.p.AnyRecommends())
		})
	}
}

// TestGathererSaysWhatItCouldNotRead: each read that fails is named in
// the error, with the namespace it was for.
func TestGathererSaysWhatItCouldNotRead(t *testing.T) {
	boom := errors.New("boom")
	failList := func(kind string) interceptor.Funcs {
		return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch list.(type) {
			case *corev1.NamespaceList:
				if kind == "namespaces" {
					return boom
				}
			case *v1alpha1.RightsizingPolicyList:
				if kind == "namespaced" {
					return boom
				}
			case *v1alpha1.ClusterRightsizingPolicyList:
				if kind == "cluster" {
					return boom
				}
			}
			return c.List(ctx, list, opts...)
		}}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		funcs interceptor.Funcs
		all   bool
		ns    string
		want  string
	}{
		{"a namespace that is not there", interceptor.Funcs{}, false, "team-c", `read namespace team-c: namespaces "team-c" not found`},
		{"the namespace's policies", failList("namespaced"), false, "team-a", "list RightsizingPolicies in team-a: boom"},
		{"the cluster's policies", failList("cluster"), false, "team-a", "list ClusterRightsizingPolicies: boom"},
		{"every namespace", failList("namespaces"), true, "", "list namespaces: boom"},
		{"every RightsizingPolicy", failList("namespaced"), true, "", "list RightsizingPolicies: boom"},
		{"every ClusterRightsizingPolicy", failList("cluster"), true, "", "list ClusterRightsizingPolicies: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := Gatherer{Reader: gatherFixture(t, tc.funcs)}
			var p *Policies
			var err error
			if tc.all {
				p, err = g.All(ctx)
			} else {
				p, err = g.InNamespace(ctx, tc.ns)
			}
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
