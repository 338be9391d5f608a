package v1alpha1_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// testNamespace is where the namespaced objects of these tests live.
const testNamespace = "default"

// fromYAML builds an unstructured object of Kerf's group from the YAML of
// its kind and spec, the way a user's manifest reaches the apiserver.
func fromYAML(t *testing.T, kind, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if specYAML != "" {
		var spec map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(specYAML), &spec), "spec YAML")
		u.Object["spec"] = spec
	}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetName(name)
	if kind != "ClusterRightsizingPolicy" && kind != "ClusterRollbackPolicy" {
		u.SetNamespace(testNamespace)
	}
	return u
}

// create creates obj and returns the apiserver's answer.
func create(t *testing.T, obj client.Object) error {
	t.Helper()
	return controlplane.Get(t).Client.Create(context.Background(), obj)
}
