package rightsizing_test

// Tests of the backoff design's RollbackPolicy and ClusterRollbackPolicy
// on a whole leader (issue 33, item 5): written as docs/api.md shows them,
// they govern a workload through the same guardrails as a
// RightsizingPolicy.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// createYAML creates the object a user's manifest describes, as kubectl
// would send it, in namespace ns when ns is not empty.
func createYAML(t *testing.T, c client.Client, ns, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(manifest), &u.Object))
	if ns != "" {
		u.SetNamespace(ns)
	}
	require.NoError(t, c.Create(context.Background(), u))
	return u
}

// waitPolicyRef waits until the recommendation's status.policy names kind
// and name.
func waitPolicyRef(t *testing.T, c client.Client, ns string, kind v1alpha1.PolicyKind, name string) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	return kubetest.WaitRSR(t, c, ns, "web", func(r *v1alpha1.RightsizingRecommendation) bool {
		return r.Status.Policy != nil && r.Status.Policy.Kind == kind && r.Status.Policy.Name == name
	}, "status.policy never named %s %s", kind, name)
}

// TestARollbackPolicysMonitoringPeriodEndsTheWatchHealthy: a RollbackPolicy
// written in the design's words governs a Rollout; its monitoringPeriod,
// not the 30m default, ends the watch Healthy, and the recommendation
// names the RollbackPolicy.
func TestARollbackPolicysMonitoringPeriodEndsTheWatchHealthy(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	createYAML(t, c, ns, `
apiVersion: kerf.dev/v1alpha1
kind: RollbackPolicy
metadata:
  name: web-rollback
spec:
  selector:
    workloadSelector:
      matchLabels:
        app: web
  monitoringPeriod: 3s
  rollbackTarget: LastSuccessful
  adoptionThreshold: 100
  backoff:
    timePeriod: 10m
    multiplyByTurn: 2
    maxAttempts: 3
`)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(context.Background(), dep))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(context.Background(), kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	rsr := waitPolicyRef(t, c, ns, v1alpha1.PolicyKindRollback, "web-rollback")
	assert.NotEmpty(t, rsr.Status.Policy.Fingerprint)
	applied := kubetest.HistoryOf(rsr, v1alpha1.ActionApplied)
	require.Len(t, applied, 1)
	assert.Contains(t, applied[0].Message, "under RollbackPolicy web-rollback")

	kubetest.AdoptedPod(t, c, dep, "web-new-1")
	healthy := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseHealthy, "")
	require.NotNil(t, healthy.Status.Change)
	assert.Equal(t, v1alpha1.BackoffMonitoringSucceeded, healthy.Status.Rollback.State)
	assert.Equal(t, healthy.Status.Change.ValueFingerprint, healthy.Status.LastHealthy.ValueFingerprint)
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventMonitoringSucceeded, 1)
}

// TestARollbackPolicysMaxAttemptsLetsTheSameValuesRetry: the design's
// backoff {timePeriod, maxAttempts: 2} backs an OOM rollback off for
// timePeriod and then applies the same values again as turn 2; with
// Kerf's default of one attempt they would be failedPermanent.
func TestARollbackPolicysMaxAttemptsLetsTheSameValuesRetry(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	createYAML(t, c, ns, `
apiVersion: kerf.dev/v1alpha1
kind: RollbackPolicy
metadata:
  name: web-rollback
spec:
  monitoringPeriod: 1h
  rollbackTarget: Manifest
  backoff:
    timePeriod: 10s
    multiplyByTurn: 1
    maxAttempts: 2
`)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	require.NoError(t, c.Create(context.Background(), dep))
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now, Signals: kubetest.KernelOnly(src)})
	require.NoError(t, c.Create(context.Background(), kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
	waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 1)
	waitPolicyRef(t, c, ns, v1alpha1.PolicyKindRollback, "web-rollback")

	// The kill is counted once the leader has seen the adopted pod: look
	// again until it has.
	pod := kubetest.AdoptedPod(t, c, dep, "web-turn-1")
	offset.Add(int64(time.Second))
	src.AddOOMKill(pod.UID, "app", now())
	poke := poker(t, c, ns)
	kubetest.WaitFor(t, 20*time.Second, func() bool {
		st := kubetest.GetRSR(t, c, ns, "web").Status.Rollback
		if st != nil && st.State == v1alpha1.BackoffBackingOff {
			return true
		}
		poke()
		return false
	}, "the OOM kill never rolled the change back")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "rollbackTarget Manifest restored the manifest's memory")

	offset.Add(int64(11 * time.Second))
	poke()
	waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 2)
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the same values applied again as turn 2")
}

// TestRightsizingPolicyBeatsARollbackPolicyOfEqualWeight: both kinds select
// the workload; at equal weight the paused RightsizingPolicy governs, and
// once the RollbackPolicy weighs more it does, its change reconciled
// through the leader's watch on RollbackPolicies.
func TestRightsizingPolicyBeatsARollbackPolicyOfEqualWeight(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	rb := createYAML(t, c, ns, `
apiVersion: kerf.dev/v1alpha1
kind: RollbackPolicy
metadata:
  name: web-rollback
spec:
  monitoringPeriod: 1h
`)
	kubetest.Web(t, c, ns, kubetest.NamespacedPolicy(ns, true))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
	waitPolicyRef(t, c, ns, v1alpha1.PolicyKindNamespaced, "guard")

	require.NoError(t, unstructured.SetNestedField(rb.Object, int64(1), "spec", "weight"))
	require.NoError(t, c.Update(ctx, rb))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	waitPolicyRef(t, c, ns, v1alpha1.PolicyKindRollback, "web-rollback")
}

// TestAClusterRollbackPolicySelectsByNamespaceLabel: a recommendation no
// policy selects is Blocked NoPolicy; a ClusterRollbackPolicy that selects
// its namespace's label, created then, governs it.
func TestAClusterRollbackPolicySelectsByNamespaceLabel(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	var namespace corev1.Namespace
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: ns}, &namespace))
	kubetest.Update(t, c, &namespace, func() { namespace.Labels["rollback-team"] = ns })
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)

	name := controlplane.UniqueName("team")
	p := createYAML(t, c, "", `
apiVersion: kerf.dev/v1alpha1
kind: ClusterRollbackPolicy
metadata:
  name: `+name+`
spec:
  selector:
    namespaceSelector:
      matchLabels:
        rollback-team: `+ns+`
  monitoringPeriod: 1h
  rollbackTarget: LastSuccessful
`)
	t.Cleanup(func() { _ = c.Delete(context.Background(), p) })
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	waitPolicyRef(t, c, ns, v1alpha1.PolicyKindClusterRollback, name)
}
