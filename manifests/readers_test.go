package manifests_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

// TestTheLeaderAndTheAgentMayReviewTheirCallers checks the rights the
// endpoints' authentication needs (internal/authn): TokenReview and
// SubjectAccessReview, and nothing more about authorization.
func TestTheLeaderAndTheAgentMayReviewTheirCallers(t *testing.T) {
	cp, _ := installed(t)
	for _, sa := range []string{leaderSA, agentSA} {
		assert.True(t, can(t, cp, sa, "create", "tokenreviews.authentication.k8s.io", ""), "%s creates TokenReviews", sa)
		assert.True(t, can(t, cp, sa, "create", "subjectaccessreviews.authorization.k8s.io", ""), "%s creates SubjectAccessReviews", sa)
		assert.False(t, can(t, cp, sa, "create", "localsubjectaccessreviews.authorization.k8s.io", "default"), sa)
		assert.False(t, can(t, cp, sa, "get", "/metrics", ""), "%s reads no one's metrics", sa)
	}
}

// TestTheReaderRolesGrantMetricsAndOneNamespacesAudit binds the reader
// ClusterRoles as docs/install.md says and checks what they allow.
func TestTheReaderRolesGrantMetricsAndOneNamespacesAudit(t *testing.T) {
	cp, _ := installed(t)
	ctx := context.Background()
	prom, team := controlplane.UniqueName("prometheus"), controlplane.UniqueName("team")
	ns := controlplane.UniqueName("readers")
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: prom},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kerf-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: prom}},
	}))
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: team},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kerf-audit-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: team}},
	}))
	assert.True(t, can(t, cp, prom, "get", "/metrics", ""))
	assert.False(t, can(t, cp, prom, "list", "rightsizingrecommendations.kerf.dev", ns))
	assert.True(t, can(t, cp, team, "list", "rightsizingrecommendations.kerf.dev", ns))
	assert.False(t, can(t, cp, team, "list", "rightsizingrecommendations.kerf.dev", ""), "not across namespaces")
	assert.False(t, can(t, cp, team, "list", "rightsizingrecommendations.kerf.dev", "default"))
	assert.False(t, can(t, cp, team, "get", "/metrics", ""))
	assert.False(t, can(t, cp, team, "update", "rightsizingrecommendations.kerf.dev", ns), "reading only")
}

// TestTheNetworkPoliciesLetInEveryPortKerfServes checks the policies
// against the pods' ports: each policy selects its pods, every port a
// Kerf container declares is let in by a rule naming it (no port closed
// by mistake, no rule for a port that does not exist), and the stream
// only from the agents' pods.
func TestTheNetworkPoliciesLetInEveryPortKerfServes(t *testing.T) {
	objs := kustomizetest.Objects(t, kustomizetest.Manifests(t))
	var dep appsv1.Deployment
	kustomizetest.Object(t, objs, "Deployment", "kerf-leader", &dep)
	var ds appsv1.DaemonSet
	kustomizetest.Object(t, objs, "DaemonSet", "kerf-agent", &ds)
	for _, c := range []struct {
		policy string
		pod    corev1.PodTemplateSpec
	}{{"kerf-leader", dep.Spec.Template}, {"kerf-agent", ds.Spec.Template}} {
		var np networkingv1.NetworkPolicy
		kustomizetest.Object(t, objs, "NetworkPolicy", c.policy, &np)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		require.NoError(t, err)
		assert.True(t, sel.Matches(labels.Set(c.pod.Labels)), "%s selects its pods", c.policy)
		assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "%s: ingress only", c.policy)
		declared := map[string]bool{}
		for _, ctr := range c.pod.Spec.Containers {
			for _, p := range ctr.Ports {
				require.NotEmpty(t, p.Name, "%s: container port %d has a name the policy can use", c.policy, p.ContainerPort)
				declared[p.Name] = true
			}
		}
		opened := map[string]bool{}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				require.NotNil(t, p.Port, "%s: a rule for every port", c.policy)
				assert.True(t, declared[p.Port.String()], "%s opens port %s, which its pods do not declare", c.policy, p.Port.String())
				opened[p.Port.String()] = true
			}
		}
		assert.Equal(t, declared, opened, "%s opens exactly the ports its pods serve", c.policy)
	}
	var np networkingv1.NetworkPolicy
	kustomizetest.Object(t, objs, "NetworkPolicy", "kerf-leader", &np)
	for _, rule := range np.Spec.Ingress {
		if rule.Ports[0].Port.String() != "stream" {
			continue
		}
		require.Len(t, rule.From, 1)
		sel, err := metav1.LabelSelectorAsSelector(rule.From[0].PodSelector)
		require.NoError(t, err)
		assert.Nil(t, rule.From[0].NamespaceSelector, "the agents' pods in the policy's own namespace")
		assert.True(t, sel.Matches(labels.Set(ds.Spec.Template.Labels)), "the stream is let in from the agents' pods")
		assert.False(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "and not from others")
	}
}
