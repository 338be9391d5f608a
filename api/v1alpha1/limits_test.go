package v1alpha1_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// TestLimitsAreTheCRDsFigures compares every limit the leader cuts a
// status to with the figure the generated CRD in manifests/crd carries:
// the markers cannot name the Go constants, so an edit of one side alone
// fails here.
func TestLimitsAreTheCRDsFigures(t *testing.T) {
	rsr := crdSchema(t, "kerf.dev_rightsizingrecommendations.yaml")
	ckpt := crdSchema(t, "kerf.dev_rightsizingcheckpoints.yaml")
	for _, tc := range []struct {
		schema map[string]any
		path   string // fields by JSON name; [] steps into a list's items
		key    string // maxLength or maxItems
		want   int
	}{
		{rsr, "status.reason", "maxLength", v1alpha1.MaxReasonLength},
		{rsr, "status.message", "maxLength", v1alpha1.MaxStatusMessageLength},
		{rsr, "status.conditions[].message", "maxLength", v1alpha1.MaxConditionMessageLength},
		{rsr, "status.rolledBackFingerprints", "maxItems", v1alpha1.MaxRolledBackFingerprints},
		{rsr, "status.history", "maxItems", v1alpha1.MaxHistory},
		{rsr, "status.history[].reason", "maxLength", v1alpha1.MaxReasonLength},
		{rsr, "status.history[].message", "maxLength", v1alpha1.MaxActionMessageLength},
		{rsr, "status.history[].containers", "maxItems", v1alpha1.MaxActionContainers},
		{rsr, "status.history[].figures", "maxItems", v1alpha1.MaxFigures},
		{rsr, "status.history[].figures[]", "maxLength", v1alpha1.MaxFigureLength},
		{rsr, "status.history[].refusals", "maxItems", v1alpha1.MaxActionRefusals},
		{rsr, "status.history[].refusals[].reason", "maxLength", v1alpha1.MaxRefusalReasonLength},
		{rsr, "status.history[].refusals[].observed", "maxLength", v1alpha1.MaxRefusalFigureLength},
		{rsr, "status.history[].refusals[].threshold", "maxLength", v1alpha1.MaxRefusalFigureLength},
		{rsr, "status.breach.figures", "maxItems", v1alpha1.MaxFigures},
		{rsr, "status.rollback.reason", "maxLength", v1alpha1.MaxReasonLength},
		{rsr, "status.rollback.message", "maxLength", v1alpha1.MaxRollbackMessageLength},
		{rsr, "status.rollback.turns", "maxItems", v1alpha1.MaxTurns},
		{rsr, "status.rollback.turns[].reason", "maxLength", v1alpha1.MaxReasonLength},
		{rsr, "status.rollback.turns[].outcome", "maxLength", v1alpha1.MaxOutcomeLength},
		{rsr, "status.change.touched", "maxItems", v1alpha1.MaxTouched},
		{rsr, "status.change.canary.pods", "maxItems", v1alpha1.MaxCanaryPods},
		{rsr, "status.change.canary.pods[]", "maxLength", 253},
		{rsr, "status.change.restartBaselines", "maxItems", v1alpha1.MaxBaselines},
		{rsr, "status.change.oomBaselines", "maxItems", v1alpha1.MaxBaselines},
		{rsr, "status.change.throttlingBaselines", "maxItems", v1alpha1.MaxBaselines},
		{ckpt, "status.containers", "maxItems", v1alpha1.MaxCheckpointContainers},
		{ckpt, "status.containers[].data", "maxLength", base64.StdEncoding.EncodedLen(v1alpha1.MaxContainerCheckpointBytes)},
	} {
		t.Run(tc.path+"."+tc.key, func(t *testing.T) {
			node := tc.schema
			for _, step := range strings.Split(tc.path, ".") {
				name, items := strings.CutSuffix(step, "[]")
				props, ok := node["properties"].(map[string]any)
				require.True(t, ok, "%s: no properties above %s", tc.path, name)
				node, ok = props[name].(map[string]any)
				require.True(t, ok, "%s: no field %s", tc.path, name)
				if items {
					node, ok = node["items"].(map[string]any)
					require.True(t, ok, "%s: %s is no list", tc.path, name)
				}
			}
			got, ok := node[tc.key].(float64)
			require.True(t, ok, "%s has no %s", tc.path, tc.key)
			assert.Equal(t, tc.want, int(got))
		})
	}
}

// crdSchema reads the openAPIV3Schema of the only version of a generated
// CRD in manifests/crd.
func crdSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crd", file))
	require.NoError(t, err)
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &crd), file)
	require.Len(t, crd.Spec.Versions, 1, file)
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}
