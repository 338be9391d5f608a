// Package manifests_test checks what `kubectl apply -k manifests/` installs
// against a real kube-apiserver: every object is accepted, the RBAC lets
// kerf-leader do its job through real calls made as its service account,
// and kerf-agent may only review its callers (agent_test.go).
package manifests_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

const (
	namespace = "kerf-system"
	leaderSA  = "system:serviceaccount:kerf-system:kerf-leader"
	agentSA   = "system:serviceaccount:kerf-system:kerf-agent"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// apply runs `kubectl apply -f -` (client-side, as `kubectl apply -k`) on
// the rendered manifests.
func apply(t *testing.T, cp *controlplane.ControlPlane, y []byte) string {
	t.Helper()
	cmd := exec.Command(kustomizetest.Kubectl(t), "--kubeconfig", cp.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = bytes.NewReader(y)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl apply:\n%s", out)
	return string(out)
}

// installed applies the manifests once for the package's tests.
func installed(t *testing.T) (*controlplane.ControlPlane, []*unstructured.Unstructured) {
	t.Helper()
	cp := controlplane.Get(t)
	y := kustomizetest.Manifests(t)
	apply(t, cp, y)
	return cp, kustomizetest.Objects(t, y)
}

func TestEveryObjectIsAcceptedByTheAPIServer(t *testing.T) {
	cp := controlplane.Get(t)
	y := kustomizetest.Manifests(t)
	objs := kustomizetest.Objects(t, y)
	// The CRDs, the namespace, both service accounts and their RBAC (the
	// agent's kerf-agent-pods unbound), the leader's Deployment, PDB and
	// two Services, the webhook, the agent's DaemonSet, the default
	// policy, the two reader ClusterRoles, the two NetworkPolicies and the
	// two admission policies bounding the leader (vap.yaml).
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	assert.Equal(t, map[string]int{
		"CustomResourceDefinition": 6, "Namespace": 1, "ServiceAccount": 2,
		"ClusterRole": 5, "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1,
		"Deployment": 1, "PodDisruptionBudget": 1, "Service": 2,
		"MutatingWebhookConfiguration": 1, "DaemonSet": 1, "ClusterRightsizingPolicy": 1,
		"NetworkPolicy": 2, "ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3,
	}, kinds)

	out := apply(t, cp, y)
	versions := func() map[string]string {
		v := map[string]string{}
		for _, u := range objs {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(u.GroupVersionKind())
			require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKeyFromObject(u), live),
				"%s %s is in the apiserver after apply:\n%s", u.GetKind(), u.GetName(), out)
			v[u.GetKind()+"/"+u.GetName()] = live.GetResourceVersion()
		}
		return v
	}
	before := versions()
	// A second apply fails on nothing and writes nothing (kubectl may still
	// say "configured" for a PodDisruptionBudget: its selector is patched
	// by replacement, a no-op the apiserver does not store).
	apply(t, cp, y)
	assert.Equal(t, before, versions(), "a re-apply is a no-op")
}

func TestTheDefaultPolicyGovernsEveryWorkloadWithTheDesignDefaults(t *testing.T) {
	cp, _ := installed(t)
	var p v1alpha1.ClusterRightsizingPolicy
	require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Name: "default"}, &p))
	r := p.Spec.Guardrails.Rollback
	assert.Equal(t, 30*time.Minute, r.WatchDuration.Duration)
	assert.Equal(t, int32(1), *r.OOMKills)
	assert.Equal(t, int32(3), *r.Restarts)
	assert.Equal(t, "0.25", r.ThrottlingRatio)
	assert.Equal(t, 24*time.Hour, r.Cooldown.Duration)
	assert.Equal(t, v1alpha1.RestorePrevious, r.RestoreTo)
	assert.Equal(t, int32(1), r.Backoff.MaxAttempts)
	assert.False(t, p.Spec.Guardrails.Paused)
	assert.Empty(t, p.Spec.Selector.Kinds, "every workload kind")
}

func TestTheWebhookManifestIsTheLeadersConfiguration(t *testing.T) {
	var got admissionregistrationv1.MutatingWebhookConfiguration
	kustomizetest.Object(t, kustomizetest.Objects(t, kustomizetest.Manifests(t)), "MutatingWebhookConfiguration", "kerf", &got)
	want := webhook.Configuration("kerf", namespace, "kerf-webhook", nil)
	assert.Equal(t, want.Webhooks, got.Webhooks)
	assert.Equal(t, want.Name, got.Name)
}

// can runs `kubectl auth can-i` as user and returns its answer. resource
// is [group-qualified] resource[/name], with a subresource after a colon
// (pods:resize).
func can(t *testing.T, cp *controlplane.ControlPlane, user, verb, resource, ns string) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(resource, ":")
	args := []string{"--kubeconfig", cp.Kubeconfig, "auth", "can-i", verb, resource, "--as", user}
	if sub != "" {
		args = append(args, "--subresource", sub)
	}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kustomizetest.Kubectl(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	answer := strings.TrimSpace(string(out))
	if err != nil && answer != "no" {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return answer == "yes"
}

func TestLeaderRBACAllowsWhatTheLeaderDoesAndNoMore(t *testing.T) {
	cp, _ := installed(t)
	for _, c := range []struct {
		verb, resource, ns string
		allowed            bool
	}{
		{"watch", "rightsizingrecommendations.kerf.dev", "", true},
		{"update", "rightsizingrecommendations.kerf.dev:status", "default", true},
		{"update", "rightsizingrecommendations.kerf.dev", "default", false}, // status only
		{"patch", "rightsizingrecommendations.kerf.dev", "default", true},   // the hub forwarder's finalizer, the recommender
		{"create", "rightsizingrecommendations.kerf.dev", "default", true},  // the recommender
		{"delete", "rightsizingrecommendations.kerf.dev", "default", false},
		{"list", "rightsizingcheckpoints.kerf.dev", "", true},         // the recommender's checkpoints
		{"patch", "rightsizingcheckpoints.kerf.dev", "default", true}, // written whole
		{"create", "rightsizingcheckpoints.kerf.dev", "default", true},
		{"delete", "rightsizingcheckpoints.kerf.dev", "default", true}, // its workload is gone
		{"update", "rightsizingcheckpoints.kerf.dev", "default", false},
		{"list", "clusterrightsizingpolicies.kerf.dev", "", true},
		{"list", "rightsizingpolicies.kerf.dev", "", true},
		{"watch", "rollbackpolicies.kerf.dev", "", true},        // the backoff design's kinds, read as policies
		{"watch", "clusterrollbackpolicies.kerf.dev", "", true}, //
		{"update", "rollbackpolicies.kerf.dev", "default", false},
		{"watch", "pods", "", true},
		{"update", "pods:resize", "default", true},
		{"update", "pods", "default", false},
		{"delete", "pods", "default", false},
		{"list", "namespaces", "", true},
		{"watch", "limitranges", "", true}, // the LimitRange gate
		{"update", "limitranges", "default", false},
		{"patch", "deployments.apps", "default", true},
		{"patch", "statefulsets.apps", "default", true},
		{"patch", "daemonsets.apps", "default", true},
		{"watch", "replicasets.apps", "", true},
		{"patch", "replicasets.apps", "default", false},
		{"patch", "horizontalpodautoscalers.autoscaling", "default", true},
		{"watch", "resourcequotas", "", true}, // the gates (cluster/gates)
		{"update", "resourcequotas", "default", false},
		{"watch", "nodes", "", true},
		{"patch", "nodes", "", false},
		{"watch", "poddisruptionbudgets.policy", "", true},
		{"update", "poddisruptionbudgets.policy", "default", false},
		{"create", "events", "default", true},
		{"create", "events.events.k8s.io", "default", true},
		{"create", "tokenreviews.authentication.k8s.io", "", true},
		{"update", "mutatingwebhookconfigurations.admissionregistration.k8s.io/kerf", "", true},
		{"update", "mutatingwebhookconfigurations.admissionregistration.k8s.io/other", "", false},
		{"update", "leases.coordination.k8s.io/kerf-leader", namespace, true},
		{"update", "leases.coordination.k8s.io/kerf-leader", "default", false},
		{"get", "secrets/kerf-webhook-cert", namespace, true},
		{"update", "secrets/kerf-leader-cert", namespace, true},
		{"get", "secrets/other", namespace, false},
		{"list", "secrets", namespace, false},
		{"get", "secrets", "default", false},
		{"update", "configmaps/kerf-leader-ca", namespace, true},
		{"update", "configmaps/kerf-hub-delivery", namespace, true},
		{"get", "configmaps/other", namespace, false},
	} {
		assert.Equal(t, c.allowed, can(t, cp, leaderSA, c.verb, c.resource, c.ns), "kerf-leader %s %s in %q", c.verb, c.resource, c.ns)
	}
}

// as returns clients that act as user.
func as(t *testing.T, cp *controlplane.ControlPlane, user string) (client.Client, kubernetes.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return c, cs
}

// TestTheLeaderManagesItsCertificatesAsItsServiceAccount makes the calls
// kerf-leader makes at start, as its service account: the stream's
// self-managed certificate with its CA published for the agents, the
// webhook's with the caBundle patched, and a TokenReview.
func TestTheLeaderManagesItsCertificatesAsItsServiceAccount(t *testing.T) {
	cp, objs := installed(t)
	ctx := context.Background()
	c, cs := as(t, cp, leaderSA)

	// The stream, as cmd/kerf-leader sets it up by default.
	stream, err := cert.NewSelfManaged(ctx, c, cert.Options{Namespace: namespace,
		ServiceName: "kerf-leader", SecretName: "kerf-leader-cert", CAConfigMap: "kerf-leader-ca"}, nil)
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kerf-leader-ca"}, &cm))
	require.NotEmpty(t, cm.Data[cert.CAConfigMapKey])

	// The agent verifies it as its DaemonSet says: the ConfigMap's CA and
	// --leader-server-name.
	var ds appsv1.DaemonSet
	kustomizetest.Object(t, objs, "DaemonSet", "kerf-agent", &ds)
	serverName := flagValue(t, ds.Spec.Template.Spec.Containers[0].Args, "--leader-server-name")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM([]byte(cm.Data[cert.CAConfigMapKey])))
	leaf, err := stream.GetCertificate(nil)
	require.NoError(t, err)
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: serverName})
	assert.NoError(t, err, "the stream certificate verifies as %s with the published CA", serverName)
	assert.Equal(t, "/etc/kerf/leader-ca/"+cert.CAConfigMapKey, flagValue(t, ds.Spec.Template.Spec.Containers[0].Args, "--leader-ca"))

	// A renewal by another replica is published again.
	require.NoError(t, cert.PublishCA(ctx, c, namespace, "kerf-leader-ca", []byte("other")))
	require.NoError(t, cert.PublishCA(ctx, c, namespace, "kerf-leader-ca", stream.CABundle()))
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kerf-leader-ca"}, &cm))
	assert.Equal(t, string(stream.CABundle()), cm.Data[cert.CAConfigMapKey])

	// The webhook: its own Secret and the caBundle of its configuration,
	// which a re-apply of the manifests keeps.
	wh, err := cert.NewSelfManaged(ctx, c, cert.Options{Namespace: namespace,
		ServiceName: "kerf-webhook", SecretName: "kerf-webhook-cert", WebhookConfiguration: "kerf"}, nil)
	require.NoError(t, err)
	require.NoError(t, cert.PatchCABundle(ctx, c, "kerf", wh.CABundle()))
	apply(t, cp, kustomizetest.Manifests(t))
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "kerf"}, &cfg))
	assert.Equal(t, wh.CABundle(), cfg.Webhooks[0].ClientConfig.CABundle, "a re-apply keeps the leader's caBundle")

	// The stream's authentication.
	_, err = cs.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "x"}}, metav1.CreateOptions{})
	assert.NoError(t, err)

	// The TLS configuration the stream serves with, end to end.
	tlsCfg := cert.TLSConfig(stream.GetCertificate)
	served, err := tlsCfg.GetCertificate(&tls.ClientHelloInfo{ServerName: serverName})
	require.NoError(t, err)
	assert.NotNil(t, served)
}

func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %v", name, args)
	return ""
}

func TestTheAgentDialsTheLeaderServiceByIPAndPortName(t *testing.T) {
	objs := kustomizetest.Objects(t, kustomizetest.Manifests(t))
	var ds appsv1.DaemonSet
	kustomizetest.Object(t, objs, "DaemonSet", "kerf-agent", &ds)
	var svc corev1.Service
	kustomizetest.Object(t, objs, "Service", "kerf-leader", &svc)
	args := ds.Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, "$(KERF_LEADER_SERVICE_HOST):$(KERF_LEADER_SERVICE_PORT_STREAM)", flagValue(t, args, "--leader-addr"))
	assert.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "stream" }),
		"the Service's port named stream sets KERF_LEADER_SERVICE_PORT_STREAM")
	assert.Equal(t, "kerf-leader."+namespace+".svc", flagValue(t, args, "--leader-server-name"))
	spec := ds.Spec.Template.Spec
	assert.Equal(t, "system-node-critical", spec.PriorityClassName)
	assert.Contains(t, spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists}, "tolerates every taint")
	sc := spec.Containers[0].SecurityContext
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.NotContains(t, sc.Capabilities.Add, corev1.Capability("SYS_ADMIN"))
	assert.False(t, ptr.Deref(sc.Privileged, false))
	var token bool
	for _, v := range spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				token = token || s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == "kerf-leader"
			}
		}
	}
	assert.True(t, token, "a projected token with the leader's audience")

	var dep appsv1.Deployment
	kustomizetest.Object(t, objs, "Deployment", "kerf-leader", &dep)
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	lc := dep.Spec.Template.Spec.Containers[0]
	assert.True(t, *dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot)
	assert.True(t, *lc.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, "/readyz", lc.ReadinessProbe.HTTPGet.Path)
	var wsvc corev1.Service
	kustomizetest.Object(t, objs, "Service", "kerf-webhook", &wsvc)
	assert.False(t, wsvc.Spec.PublishNotReadyAddresses, "only ready replicas (caches synced) serve the webhook: a syncing cache may say a rolled-back recommendation is active")
	assert.False(t, svc.Spec.PublishNotReadyAddresses, "the stream reaches the leader only")
}

// TestTheLeaderHandsOverWithinItsGracePeriod checks the leader's pod
// against a graceful handover (docs/leader.md): the kubelet's SIGKILL comes
// only after the replica's bounded shutdown and the Lease's release (one
// request, bounded by the renew deadline's half), and no preStop hook
// delays the SIGTERM that starts the handover.
func TestTheLeaderHandsOverWithinItsGracePeriod(t *testing.T) {
	var dep appsv1.Deployment
	kustomizetest.Object(t, kustomizetest.Objects(t, kustomizetest.Manifests(t)), "Deployment", "kerf-leader", &dep)
	spec := dep.Spec.Template.Spec
	grace := time.Duration(ptr.Deref(spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)) * time.Second
	release := 5 * time.Second // cluster.New: the Lease client's timeout, RenewDeadline/2
	assert.Greater(t, grace, cluster.ShutdownTimeout+release, "the shutdown and the release end before the SIGKILL")
	for _, c := range spec.Containers {
		assert.True(t, c.Lifecycle == nil || c.Lifecycle.PreStop == nil, "container %s: a preStop hook delays the handover", c.Name)
	}
}

// TestTheLeaderAndTheHubSetGOMEMLIMITFromTheirLimit: both servers that
// decode what callers send run the Go runtime with the container's memory
// limit as its soft limit (issue 30, item 3), so the GC holds the heap
// under it instead of letting it reach twice the live heap.
func TestTheLeaderAndTheHubSetGOMEMLIMITFromTheirLimit(t *testing.T) {
	for _, tc := range []struct{ dir, deployment, container string }{
		{"manifests", "kerf-leader", "leader"},
		{"manifests/hub", "kerf-hub", "hub"},
	} {
		t.Run(tc.deployment, func(t *testing.T) {
			objs := kustomizetest.Objects(t, kustomizetest.Render(t, filepath.Join("..", tc.dir)))
			var d appsv1.Deployment
			kustomizetest.Object(t, objs, "Deployment", tc.deployment, &d)
			var c *corev1.Container
			for i := range d.Spec.Template.Spec.Containers {
				if d.Spec.Template.Spec.Containers[i].Name == tc.container {
					c = &d.Spec.Template.Spec.Containers[i]
				}
			}
			require.NotNil(t, c, "container %s", tc.container)
			require.NotNil(t, c.Resources.Limits.Memory(), "a memory limit")
			env := map[string]corev1.EnvVar{}
			for i, e := range c.Env {
				env[e.Name] = c.Env[i]
			}
			require.Contains(t, env, "GOMEMLIMIT")
			assert.Equal(t, "$(KERF_MEMORY_LIMIT_MIB)MiB", env["GOMEMLIMIT"].Value)
			ref := env["KERF_MEMORY_LIMIT_MIB"].ValueFrom
			require.NotNil(t, ref)
			require.NotNil(t, ref.ResourceFieldRef)
			assert.Equal(t, "limits.memory", ref.ResourceFieldRef.Resource)
			assert.Equal(t, tc.container, ref.ResourceFieldRef.ContainerName)
			assert.Equal(t, "1Mi", ref.ResourceFieldRef.Divisor.String())
		})
	}
}
