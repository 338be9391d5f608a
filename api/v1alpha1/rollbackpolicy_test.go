package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestRollbackPolicyAsTheDesignWritesIt creates a RollbackPolicy in the
// backoff design's own words and reads back every field it set, and the
// defaults of the ones it left out.
func TestRollbackPolicyAsTheDesignWritesIt(t *testing.T) {
	const manifest = `
apiVersion: kerf.dev/v1alpha1
kind: RollbackPolicy
metadata:
  name: checkout
  namespace: default
spec:
  selector:
    workloadSelector:
      matchLabels: {app: checkout}
  monitoringPeriod: 15m
  rollbackTarget: Manifest
  adoptionThreshold: 80
  backoff:
    timePeriod: 5m
    multiplyByTurn: 2
    maxAttempts: 3
`
	var p v1alpha1.RollbackPolicy
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), &p))
	p.Name = controlplane.UniqueName("checkout")
	c := controlplane.Get(t).Client
	require.NoError(t, c.Create(context.Background(), &p))
	var got v1alpha1.RollbackPolicy
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(&p), &got))
	assert.Equal(t, v1alpha1.RollbackPolicySpec{
		Selector:          v1alpha1.PolicySelector{WorkloadSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}},
		MonitoringPeriod:  &metav1.Duration{Duration: 15 * time.Minute},
		RollbackTarget:    v1alpha1.RollbackTargetManifest,
		AdoptionThreshold: 80,
		Backoff:           v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 5 * time.Minute}, MultiplyByTurn: 2, MaxAttempts: 3},
		OOMKills:          ptr.To[int32](1),
		Restarts:          ptr.To[int32](3),
		ThrottlingRatio:   "0.25",
		Cooldown:          &metav1.Duration{Duration: 24 * time.Hour},
	}, got.Spec)

	// An empty ClusterRollbackPolicy gets every default; its rollback
	// target is the design's LastSuccessful.
	cluster := fromYAML(t, "ClusterRollbackPolicy", controlplane.UniqueName("empty"), "")
	require.NoError(t, create(t, cluster))
	t.Cleanup(func() { _ = c.Delete(context.Background(), cluster) })
	var empty v1alpha1.ClusterRollbackPolicy
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(cluster), &empty))
	assert.Equal(t, &metav1.Duration{Duration: v1alpha1.DefaultWatchDuration}, empty.Spec.MonitoringPeriod)
	assert.Equal(t, v1alpha1.DefaultRollbackTarget, empty.Spec.RollbackTarget)
	assert.Equal(t, v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: v1alpha1.DefaultBackoffTimePeriod},
		MultiplyByTurn: v1alpha1.DefaultMultiplyByTurn, MaxAttempts: v1alpha1.DefaultMaxAttempts}, empty.Spec.Backoff)
}

// TestAdmissionRefusesBadRollbackPolicies: the design's kinds are refused
// with a message naming the field, as a RightsizingPolicy is.
func TestAdmissionRefusesBadRollbackPolicies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      string
		spec      string
		wantField string
		wantMsg   string
	}{
		{"monitoring period unparsable", "RollbackPolicy", `monitoringPeriod: soon`, "spec.monitoringPeriod", "positive duration"},
		{"monitoring period zero", "ClusterRollbackPolicy", `monitoringPeriod: 0s`, "spec.monitoringPeriod", "positive duration"},
		{"monitoring period in days", "RollbackPolicy", `monitoringPeriod: 1d`, "spec.monitoringPeriod", "positive duration"},
		{"rollback target Previous", "RollbackPolicy", `rollbackTarget: Previous`, "spec.rollbackTarget", `supported values: "LastSuccessful", "Manifest"`},
		{"rollback target unknown", "ClusterRollbackPolicy", `rollbackTarget: Yesterday`, "spec.rollbackTarget", `supported values: "LastSuccessful", "Manifest"`},
		{"adoption threshold above 100", "RollbackPolicy", `adoptionThreshold: 101`, "spec.adoptionThreshold", "less than or equal to 100"},
		{"adoption threshold negative", "ClusterRollbackPolicy", `adoptionThreshold: -1`, "spec.adoptionThreshold", "greater than or equal to 0"},
		{"adoption threshold as a percent string", "RollbackPolicy", `adoptionThreshold: "80%"`, "spec.adoptionThreshold", "integer"},
		{"max attempts zero", "RollbackPolicy", `backoff: {maxAttempts: 0}`, "spec.backoff.maxAttempts", "greater than or equal to 1"},
		{"multiply by turn zero", "ClusterRollbackPolicy", `backoff: {multiplyByTurn: 0}`, "spec.backoff.multiplyByTurn", "greater than or equal to 1"},
		{"time period zero", "RollbackPolicy", `backoff: {timePeriod: 0m}`, "spec.backoff.timePeriod", "positive duration"},
		{"throttling ratio above one", "RollbackPolicy", `throttlingRatio: "1.5"`, "spec.throttlingRatio", "decimal string in (0, 1]"},
		{"negative oom kills", "ClusterRollbackPolicy", `oomKills: -1`, "spec.oomKills", "greater than or equal to 0"},
		{"negative restarts", "RollbackPolicy", `restarts: -1`, "spec.restarts", "greater than or equal to 0"},
		{"cooldown negative", "RollbackPolicy", `cooldown: -1h`, "spec.cooldown", "duration such as 24h"},
		{"negative weight", "ClusterRollbackPolicy", `weight: -1`, "spec.weight", "greater than or equal to 0"},
		{"namespace selector on a namespaced policy", "RollbackPolicy", `selector: {namespaceSelector: {matchLabels: {team: a}}}`, "spec.selector.namespaceSelector", "selects only in its own namespace"},
		{"workload kind kerf cannot manage", "RollbackPolicy", `selector: {kinds: [CronJob]}`, "spec.selector.kinds[0]", `supported values: "Deployment", "StatefulSet", "DaemonSet"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(t, fromYAML(t, tc.kind, controlplane.UniqueName("bad"), tc.spec))
			require.Error(t, err, "the apiserver accepted a bad %s", tc.kind)
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.wantField+":", "the message names the field")
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

// TestRollbackPolicyThresholdsValidateAsGuardrails holds the schema of each
// field a RollbackPolicy shares with spec.guardrails.rollback equal to the
// RightsizingPolicy's, in the CRDs the apiserver is given: one validation.
func TestRollbackPolicyThresholdsValidateAsGuardrails(t *testing.T) {
	schema := func(name string) apiextensionsv1.JSONSchemaProps {
		raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crd", "kerf.dev_"+strings.TrimSuffix(name, ".kerf.dev")+".yaml"))
		require.NoError(t, err)
		var crd apiextensionsv1.CustomResourceDefinition
		require.NoError(t, yaml.Unmarshal(raw, &crd))
		return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	}
	for _, pair := range []struct{ rollback, rightsizing string }{
		{"rollbackpolicies.kerf.dev", "rightsizingpolicies.kerf.dev"},
		{"clusterrollbackpolicies.kerf.dev", "clusterrightsizingpolicies.kerf.dev"},
	} {
		rb, rs := schema(pair.rollback), schema(pair.rightsizing)
		guard := rs.Properties["guardrails"].Properties["rollback"]
		for rbField, rsField := range map[string]string{
			"monitoringPeriod": "watchDuration", "adoptionThreshold": "adoptionThresholdPercent", "backoff": "backoff",
			"oomKills": "oomKills", "restarts": "restarts", "throttlingRatio": "throttlingRatio", "cooldown": "cooldown",
		} {
			want, got := guard.Properties[rsField], rb.Properties[rbField]
			want.Description, got.Description = "", ""
			assert.Equal(t, want, got, "%s spec.%s against spec.guardrails.rollback.%s", pair.rollback, rbField, rsField)
		}
		want, got := rs.Properties["selector"], rb.Properties["selector"]
		want.Description, got.Description = "", ""
		assert.Equal(t, want, got, "%s spec.selector", pair.rollback)
	}
}
