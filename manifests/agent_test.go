package manifests_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/node"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

// bareSA is a service account of kerf-system bound to nothing: what any
// service account may do, which the agent's rights are compared with.
const bareSA = "system:serviceaccount:kerf-system:kerf-bare"

// agentReviews are the agent's only rights beyond a bare service
// account's: the two reviews its /metrics asks of the apiserver.
var agentReviews = []string{
	"create authentication.k8s.io/tokenreviews",
	"create authorization.k8s.io/subjectaccessreviews",
}

// podsRights are what ClusterRole kerf-agent-pods adds: the informer's.
var podsRights = []string{"get /pods", "list /pods", "watch /pods"}

// rights returns every verb user may use in ns, one "verb group/resource"
// (with "/name" for a rule limited to names) or "verb URL" each, from a
// SelfSubjectRulesReview made as user on the real apiserver.
func rights(t *testing.T, cp *controlplane.ControlPlane, user, ns string) []string {
	t.Helper()
	_, cs := as(t, cp, user)
	r, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authzv1.SelfSubjectRulesReview{Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.False(t, r.Status.Incomplete, r.Status.EvaluationError)
	set := map[string]bool{}
	for _, rule := range r.Status.ResourceRules {
		for _, v := range rule.Verbs {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					if len(rule.ResourceNames) == 0 {
						set[v+" "+g+"/"+res] = true
					}
					for _, n := range rule.ResourceNames {
						set[v+" "+g+"/"+res+"/"+n] = true
					}
				}
			}
		}
	}
	for _, rule := range r.Status.NonResourceRules {
		for _, v := range rule.Verbs {
			for _, u := range rule.NonResourceURLs {
				set[v+" "+u] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// agentExtraRights returns the agent's rights in ns less a bare service
// account's, and fails if the agent lacks one of those.
func agentExtraRights(t *testing.T, cp *controlplane.ControlPlane, ns string) []string {
	t.Helper()
	agent, bare := rights(t, cp, agentSA, ns), rights(t, cp, bareSA, ns)
	var extra []string
	for _, r := range agent {
		if !slices.Contains(bare, r) {
			extra = append(extra, r)
		}
	}
	for _, r := range bare {
		assert.Contains(t, agent, r, "the agent has what any service account has")
	}
	return extra
}

// TestTheAgentMayCreateItsTwoReviewsAndNothingElse enumerates every verb
// the agent's service account holds on the real apiserver, in its own
// namespace and another: beyond what any service account may do, only the
// TokenReview and SubjectAccessReview of its /metrics. It reads no pod:
// the kubelet's Pods API gives it its node's.
func TestTheAgentMayCreateItsTwoReviewsAndNothingElse(t *testing.T) {
	cp, _ := installed(t)
	for _, ns := range []string{namespace, "default", "kube-system"} {
		assert.Equal(t, agentReviews, agentExtraRights(t, cp, ns), "kerf-agent's rights in %s beyond a bare service account's", ns)
	}
	assert.False(t, can(t, cp, agentSA, "list", "pods", ""), "no pod list without kerf-agent-pods")
	assert.False(t, can(t, cp, agentSA, "get", "pods", namespace))
	assert.False(t, can(t, cp, agentSA, "get", "secrets", namespace))
	assert.False(t, can(t, cp, agentSA, "get", "configmaps", namespace), "the CA reaches it as a volume")
}

// TestTheAgentListsPodsOnlyWithTheAgentPodsComponent attacks the apiserver
// as the agent's informer fallback (node.InformerPods, the agent's own
// code): refused, with the fix named, until the component
// manifests/agent-pods binds kerf-agent-pods; then it reads its node's
// pods, and its rights grow by get, list and watch on pods, nothing else.
func TestTheAgentListsPodsOnlyWithTheAgentPodsComponent(t *testing.T) {
	cp, _ := installed(t)
	ctx := context.Background()
	nodeName := controlplane.UniqueName("node")
	ns := controlplane.UniqueName("agent-pods")
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "kerf.local/kerf-workload:dev"}}}}
	require.NoError(t, cp.Client.Create(ctx, pod))

	informer := func(ctx context.Context) (chan []*corev1.Pod, chan error) {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: agentSA,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
		c, err := node.NewPodClient(cfg)
		require.NoError(t, err)
		pods, done := make(chan []*corev1.Pod, 10), make(chan error, 1)
		src := &node.InformerPods{Client: c, NodeName: nodeName}
		go func() { done <- src.Run(ctx, func(p []*corev1.Pod) { pods <- slices.Clone(p) }) }()
		return pods, done
	}

	// Without the component: the agent stops and says what to bind.
	refusedCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, done := informer(refusedCtx)
	select {
	case err := <-done:
		require.ErrorIs(t, err, node.ErrPodsForbidden)
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.ErrorContains(t, err, "kerf-agent-pods")
	case <-refusedCtx.Done():
		t.Fatal("the informer kept retrying instead of stopping on the apiserver's 403")
	}
	_, cs := as(t, cp, agentSA)
	_, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	assert.True(t, apierrors.IsForbidden(err), "a list of its node's pods is refused: %v", err)

	// With the component, as an operator's overlay renders it.
	objs := kustomizetest.Objects(t, kustomizetest.Overlay(t, []string{"."}, "agent-pods"))
	var binding rbacv1.ClusterRoleBinding
	kustomizetest.Object(t, objs, "ClusterRoleBinding", "kerf-agent-pods", &binding)
	require.NoError(t, cp.Client.Create(ctx, &binding))
	t.Cleanup(func() {
		require.NoError(t, cp.Client.Delete(context.Background(), &binding))
		require.Eventually(t, func() bool { return !can(t, cp, agentSA, "list", "pods", "") }, 10*time.Second, 100*time.Millisecond)
	})
	require.Eventually(t, func() bool { return can(t, cp, agentSA, "list", "pods", "") }, 10*time.Second, 100*time.Millisecond)
	for _, ns := range []string{namespace, "default"} {
		want := slices.Sorted(slices.Values(append(slices.Clone(agentReviews), podsRights...)))
		assert.Equal(t, want, agentExtraRights(t, cp, ns), "kerf-agent's rights in %s with kerf-agent-pods", ns)
	}
	runCtx, stop := context.WithCancel(ctx)
	pods, done := informer(runCtx)
	select {
	case got := <-pods:
		require.Len(t, got, 1)
		assert.Equal(t, "app", got[0].Name)
	case err := <-done:
		t.Fatalf("the informer stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no pods after 10s")
	}
	stop()
	require.NoError(t, <-done)
}

// agentPod returns the agent DaemonSet's pod spec from rendered objects.
func agentPod(t *testing.T, objs []*unstructured.Unstructured) corev1.PodSpec {
	t.Helper()
	var ds appsv1.DaemonSet
	kustomizetest.Object(t, objs, "DaemonSet", "kerf-agent", &ds)
	require.Len(t, ds.Spec.Template.Spec.Containers, 1)
	return ds.Spec.Template.Spec
}

// TestTheAgentRunsWithTheLeastPrivilegeItNeeds checks the DaemonSet's
// privileges against docs/install.md's table: the host's pid namespace
// and /dev/kmsg are not used, the runtime's default seccomp profile
// filters its system calls, and of all capabilities only BPF and PERFMON
// are added. Root stays: a non-root container's added capabilities reach
// no process (no ambient set).
func TestTheAgentRunsWithTheLeastPrivilegeItNeeds(t *testing.T) {
	spec := agentPod(t, kustomizetest.Objects(t, kustomizetest.Manifests(t)))
	assert.False(t, spec.HostPID, "hostPID")
	assert.False(t, spec.HostNetwork, "hostNetwork")
	assert.False(t, spec.HostIPC, "hostIPC")
	sc := spec.Containers[0].SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Equal(t, []corev1.Capability{"BPF", "PERFMON"}, sc.Capabilities.Add)
	assert.False(t, ptr.Deref(sc.Privileged, false))
	assert.False(t, ptr.Deref(sc.AllowPrivilegeEscalation, true), "allowPrivilegeEscalation: false (no_new_privs)")
	assert.True(t, ptr.Deref(sc.ReadOnlyRootFilesystem, false))
	assert.Equal(t, int64(0), ptr.Deref(sc.RunAsUser, -1), "root: the capabilities need it")
	if spec.SecurityContext != nil {
		assert.Nil(t, spec.SecurityContext.SeccompProfile, "the container's profile is the one in force")
	}

	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	assert.Equal(t, map[string]string{"cgroup": "/sys/fs/cgroup", "btf": "/sys/kernel/btf", "pods-api": "/var/lib/kubelet/pods-api"},
		hostPaths, "the host paths the agent reads, and no /dev/kmsg")
	for _, m := range spec.Containers[0].VolumeMounts {
		assert.True(t, m.ReadOnly, "%s is mounted read-only", m.Name)
	}
	assert.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations,
		"every taint: a node without an agent reports no kernel OOM kill and no throttling")
}

// TestTheKubeletGivesASlowAgentTimeBeforeRestartingIt: the agent answers
// its probes once its OOM source is loaded, which took 45 s on the
// emulated VM node beside a loaded machine's tests. The liveness probe
// alone restarted it after 35 s, again and again, and each restart lost
// its counters. So a startup probe gives it minutes to start, and once
// it runs minutes of unanswered probes come before a restart: a minute
// was not enough beside a loaded machine's tests: the restart came a
// minute after an OOM kill the agent logged, and the test found it
// uncounted.
func TestTheKubeletGivesASlowAgentTimeBeforeRestartingIt(t *testing.T) {
	c := agentPod(t, kustomizetest.Objects(t, kustomizetest.Manifests(t))).Containers[0]
	window := func(p *corev1.Probe) time.Duration {
		return time.Duration(p.InitialDelaySeconds+p.PeriodSeconds*p.FailureThreshold) * time.Second
	}
	require.NotNil(t, c.StartupProbe, "a startup probe: the liveness probe waits for its first success")
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.ReadinessProbe)
	assert.GreaterOrEqual(t, window(c.StartupProbe), 3*time.Minute, "time to start before a restart")
	assert.GreaterOrEqual(t, window(c.LivenessProbe), 3*time.Minute, "unanswered liveness probes before a restart")
	assert.Equal(t, c.LivenessProbe.HTTPGet.Path, c.StartupProbe.HTTPGet.Path, "started is alive")
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		assert.GreaterOrEqual(t, p.TimeoutSeconds, int32(5), "%s: a busy node answers late; the kubelet's default is 1 s", name)
	}
}

// renderChart is `helm template kerf charts/kerf` with vals (test/helm
// compares its defaults with manifests/).
func renderChart(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	c, err := loader.Load(root + "/charts/kerf")
	require.NoError(t, err)
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.ReleaseName, inst.Namespace = true, true, "kerf", "default"
	v, err := chartutil.ParseKubeVersion(kube.KubernetesVersion)
	require.NoError(t, err)
	inst.KubeVersion = v
	rel, err := inst.Run(c, vals)
	require.NoError(t, err, "render charts/kerf")
	return kustomizetest.Objects(t, []byte(rel.Manifest))
}

// TestTheChartsAgentValuesReachTheirFields: agent.podsFromAPIServer binds
// kerf-agent-pods as the component does, and agent.hostPID,
// agent.seccompProfile and agent.tolerations set the pod's fields; by
// default the chart binds nothing and leaves hostPID off.
func TestTheChartsAgentValuesReachTheirFields(t *testing.T) {
	hasBinding := func(objs []*unstructured.Unstructured) bool {
		return slices.ContainsFunc(objs, func(u *unstructured.Unstructured) bool {
			return u.GetKind() == "ClusterRoleBinding" && u.GetName() == "kerf-agent-pods"
		})
	}
	def := renderChart(t, nil)
	assert.False(t, hasBinding(def), "kerf-agent-pods is bound only on request")
	assert.False(t, agentPod(t, def).HostPID)

	seccomp := map[string]any{"type": "Localhost", "localhostProfile": "profiles/kerf-agent.json"}
	tolerations := []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}
	objs := renderChart(t, map[string]any{"agent": map[string]any{
		"podsFromAPIServer": true, "hostPID": true, "seccompProfile": seccomp, "tolerations": tolerations}})
	var got, want rbacv1.ClusterRoleBinding
	kustomizetest.Object(t, objs, "ClusterRoleBinding", "kerf-agent-pods", &got)
	kustomizetest.Object(t, kustomizetest.Objects(t, kustomizetest.Overlay(t, []string{"."}, "agent-pods")), "ClusterRoleBinding", "kerf-agent-pods", &want)
	assert.Equal(t, want.RoleRef, got.RoleRef)
	assert.Equal(t, want.Subjects, got.Subjects)
	spec := agentPod(t, objs)
	assert.True(t, spec.HostPID)
	assert.Equal(t, &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/kerf-agent.json")},
		spec.Containers[0].SecurityContext.SeccompProfile)
	assert.Equal(t, []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		spec.Tolerations)
}
