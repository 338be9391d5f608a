package v1alpha1_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// shared is the package's one control plane: a start costs seconds.
var shared = controlplane.Shared{}

func TestMain(m *testing.M) { shared.Main(m) }

// controlPlane returns the package's control plane, starting it on first
// use; where the binaries are missing the test is skipped, unless
// controlplane.Required says it must run.
func controlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	return shared.Get(t)
}

// testNamespace is where the namespaced objects of these tests live.
const testNamespace = "default"

var nameSeq atomic.Int64

// uniqueName returns a fresh object name starting with prefix.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

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
	if kind != "ClusterRightsizingPolicy" {
		u.SetNamespace(testNamespace)
	}
	return u
}

// create creates obj and returns the apiserver's answer.
func create(t *testing.T, obj client.Object) error {
	t.Helper()
	return controlPlane(t).Client.Create(context.Background(), obj)
}
