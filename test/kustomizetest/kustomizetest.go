// Package kustomizetest renders kustomizations for tests with bin/'s
// kubectl (make deps builds it): manifests/ itself, or an operator's
// overlay of its resources and components, decoded into objects.
package kustomizetest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// Kubectl returns the path of bin/'s kubectl. Without it the test skips,
// or fails where the real parts are required (make test, CI).
func Kubectl(t testing.TB) string {
	t.Helper()
	p := filepath.Join(kube.KubernetesDir(filepath.Join(repoRoot(t), "bin")), "kubectl")
	if _, err := os.Stat(p); err != nil {
		if controlplane.Required() {
			t.Fatalf("kubectl: %v (make deps builds it)", err)
		}
		t.Skipf("kubectl not available: %v (make deps builds it)", err)
	}
	return p
}

// Render is `kubectl kustomize dir`: the rendered YAML.
func Render(t testing.TB, dir string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(Kubectl(t), "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kubectl kustomize %s:\n%s", dir, stderr.Bytes())
	return out
}

// Manifests is `kubectl kustomize manifests/`.
func Manifests(t testing.TB) []byte {
	t.Helper()
	return Render(t, filepath.Join(repoRoot(t), "manifests"))
}

// Overlay renders a kustomization of resources and components (paths
// under manifests/) made in a temporary directory, as an operator's
// overlay would be. kustomize takes no absolute paths: the kustomization
// names manifests/ relative to itself.
func Overlay(t testing.TB, resources []string, components ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "manifests"))
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, r := range resources {
		b.WriteString("  - " + filepath.Join(rel, r) + "\n")
	}
	if len(components) > 0 {
		b.WriteString("components:\n")
		for _, c := range components {
			b.WriteString("  - " + filepath.Join(rel, c) + "\n")
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o600))
	return Render(t, dir)
}

// Objects decodes rendered YAML into its objects.
func Objects(t testing.TB, y []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Object finds the object of kind and name among objs and decodes it
// strictly (no unknown field) into into; without one the test fails.
func Object(t testing.TB, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			b, err := yaml.Marshal(u.Object)
			require.NoError(t, err)
			require.NoError(t, yaml.UnmarshalStrict(b, into), "%s %s", kind, name)
			return
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	return root
}
