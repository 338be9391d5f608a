// Package helm_test checks the Helm chart charts/kerf: rendered with its
// default values it is manifests/ object by object (with forwarding on,
// manifests/ with the manifests/hub/leader-patch component; with the hub
// on, manifests/hub/ added, for each of its databases), `helm lint`
// finds nothing, values.schema.json refuses unknown and mistyped values,
// and it installs into a real kube-apiserver, upgrades and uninstalls
// leaving none of its objects behind. Helm is the module proxy's
// helm.sh/helm/v3, called as a library: the same code as the helm binary's
// template, lint, install, upgrade and uninstall.
package helm_test

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// helmLabels are the labels the chart adds to every templated object's
// metadata on purpose (templates/_helpers.tpl, Helm's conventions): they
// say which release and chart version made the object. They are in no
// selector and no pod template, so dropping them leaves the object
// manifests/ has.
var helmLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/managed-by",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	return root
}

func chartDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "charts", "kerf")
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	require.NoError(t, err, "load charts/kerf")
	return c
}

// renderChart is `helm template kerf charts/kerf --include-crds` with vals,
// for the Kubernetes version of bin/.
func renderChart(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return parse(t, renderManifest(t, vals))
}

// renderManifest is renderChart's YAML, as Helm writes it.
func renderManifest(t *testing.T, vals map[string]any) string {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly = true
	inst.DryRun = true
	inst.IncludeCRDs = true
	inst.ReleaseName = "kerf"
	inst.Namespace = "default"
	v, err := chartutil.ParseKubeVersion(kube.KubernetesVersion)
	require.NoError(t, err)
	inst.KubeVersion = v
	rel, err := inst.Run(loadChart(t), vals)
	require.NoError(t, err, "render charts/kerf")
	return rel.Manifest
}

// kustomize is `kubectl kustomize dir` with bin/'s kubectl.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl := filepath.Join(kube.KubernetesDir(filepath.Join(repoRoot(t), "bin")), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		if controlplane.Required() {
			t.Fatalf("kubectl not built (make deps): %v", err)
		}
		t.Skipf("kubectl not built (make deps): %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kubectl kustomize %s: %s", dir, stderr.String())
	return parse(t, string(out))
}

// parse splits a multi-document YAML stream into objects, skipping empty
// documents (a template whose condition is false renders one).
func parse(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "parse rendered YAML")
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s %s/%s", o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
}

// byKey indexes objs by apiVersion, kind, namespace and name, failing on a
// duplicate.
func byKey(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		k := key(o)
		require.NotContains(t, m, k, "%s renders %s twice", what, k)
		m[k] = o
	}
	return m
}

// withoutHelmLabels returns o's content without helmLabels (and without an
// emptied labels map), after checking the chart did set each of them.
func withoutHelmLabels(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	c := o.DeepCopy()
	labels := c.GetLabels()
	if c.GetKind() != "CustomResourceDefinition" { // crds/ is not templated
		for _, l := range helmLabels {
			assert.NotEmpty(t, labels[l], "%s: label %s", key(o), l)
		}
	}
	for _, l := range helmLabels {
		delete(labels, l)
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(c.Object, "metadata", "labels")
	} else {
		c.SetLabels(labels)
	}
	return c.Object
}

// assertSameObjects compares the chart's objects with kustomize's, object
// by object.
func assertSameObjects(t *testing.T, chartObjs, kustomized []*unstructured.Unstructured) {
	t.Helper()
	got, want := byKey(t, "the chart", chartObjs), byKey(t, "kustomize", kustomized)
	gotKeys, wantKeys := mapKeys(got), mapKeys(want)
	require.Equal(t, wantKeys, gotKeys, "the chart's objects are not kustomize's")
	for _, k := range wantKeys {
		assert.Equal(t, want[k].Object, withoutHelmLabels(t, got[k]), "%s differs", k)
	}
}

func mapKeys(m map[string]*unstructured.Unstructured) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// kustomization writes a kustomization.yaml into a new directory with
// resources and components (paths made relative to it: kustomize refuses
// absolute ones) and returns the directory.
func kustomization(t *testing.T, resources, components []string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			r, err := filepath.Rel(dir, p)
			require.NoError(t, err)
			out[i] = r
		}
		return out
	}
	k, err := json.Marshal(map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  rel(resources),
		"components": rel(components),
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), k, 0o600))
	return dir
}

// renderThroughKustomize renders the chart and passes its output through
// `kubectl kustomize` with no transformation: kustomize re-encodes YAML
// (a folded block scalar such as the ValidatingAdmissionPolicies' CEL
// comes out with a blank line after its first line, which CEL ignores), so
// the chart's objects are compared with manifests/ after the same encoding
// kubectl apply -k gives them.
func renderThroughKustomize(t *testing.T, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chart.yaml"), []byte(renderManifest(t, vals)), 0o600))
	return kustomize(t, kustomization(t, []string{filepath.Join(dir, "chart.yaml")}, nil))
}

// TestDefaultValuesRenderManifests: `helm template` with the default values
// gives every object `kubectl kustomize manifests/` gives, each the same
// but for helmLabels. A change to manifests/ not made in the chart (or a
// CRD regenerated and not copied to charts/kerf/crds: cp
// manifests/crd/kerf.dev_*.yaml charts/kerf/crds/) fails here.
func TestDefaultValuesRenderManifests(t *testing.T) {
	kustomized := kustomize(t, filepath.Join(repoRoot(t), "manifests"))
	require.NotEmpty(t, kustomized)
	assertSameObjects(t, renderThroughKustomize(t, nil), kustomized)
}

// TestHubForwardValuesRenderLeaderPatch: hub.forward.enabled gives the
// leader what manifests/hub/leader-patch gives it, and changes nothing
// else.
func TestHubForwardValuesRenderLeaderPatch(t *testing.T) {
	root := repoRoot(t)
	kustomized := kustomize(t, kustomization(t,
		[]string{filepath.Join(root, "manifests")},
		[]string{filepath.Join(root, "manifests", "hub", "leader-patch")}))
	rendered := renderThroughKustomize(t, map[string]any{"hub": map[string]any{"forward": map[string]any{"enabled": true}}})
	assertSameObjects(t, rendered, kustomized)
}

// TestHubValuesRenderManifestsHub: hub.enabled adds what `kubectl
// kustomize manifests/hub/` gives, object by object, for each database:
// SQLite on the claim (the defaults), PostgreSQL from a Secret
// (manifests/hub/postgres) and SQLite on an emptyDir
// (manifests/hub/ephemeral).
func TestHubValuesRenderManifestsHub(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		name      string
		hub       map[string]any
		component string
	}{
		{"sqlite", map[string]any{}, ""},
		{"postgres", map[string]any{"replicas": 2, "postgres": map[string]any{"existingSecret": "kerf-hub-database"}}, "postgres"},
		{"emptyDir", map[string]any{"storage": map[string]any{"type": "EmptyDir", "size": "1Gi"}}, "ephemeral"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var components []string
			if tc.component != "" {
				components = []string{filepath.Join(root, "manifests", "hub", tc.component)}
			}
			kustomized := kustomize(t, kustomization(t,
				[]string{filepath.Join(root, "manifests"), filepath.Join(root, "manifests", "hub")}, components))
			tc.hub["enabled"] = true
			rendered := renderThroughKustomize(t, map[string]any{"hub": tc.hub})
			// A pod's volumes are keyed by name: kustomize's patch moves
			// the one it changes first.
			for _, o := range append(slices.Clone(rendered), kustomized...) {
				vols, found, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
				if found {
					slices.SortFunc(vols, func(a, b any) int {
						return strings.Compare(a.(map[string]any)["name"].(string), b.(map[string]any)["name"].(string))
					})
					require.NoError(t, unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes"))
				}
			}
			assertSameObjects(t, rendered, kustomized)
		})
	}
}

// TestHubStorageValues: hub.storage.storageClass and size reach the claim,
// SQLite refuses a second replica with a message naming hub.replicas, and
// hub.tls.selfSigned makes a kubernetes.io/tls Secret whose certificate
// names the Service.
func TestHubStorageValues(t *testing.T) {
	objs := byKey(t, "the chart", renderChart(t, map[string]any{"hub": map[string]any{
		"enabled": true, "storage": map[string]any{"size": "50Gi", "storageClass": "fast-ssd"}}}))
	const claim = "v1/PersistentVolumeClaim kerf-hub/kerf-hub-data"
	require.Contains(t, objs, claim)
	class, _, _ := unstructured.NestedString(objs[claim].Object, "spec", "storageClassName")
	assert.Equal(t, "fast-ssd", class)
	size, _, _ := unstructured.NestedString(objs[claim].Object, "spec", "resources", "requests", "storage")
	assert.Equal(t, "50Gi", size)
	assert.NotContains(t, objs, "v1/Secret kerf-hub/kerf-hub-tls", "the TLS Secret is the user's by default")

	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.ReleaseName, inst.Namespace = true, true, "kerf", "default"
	_, err := inst.Run(loadChart(t), map[string]any{"hub": map[string]any{"enabled": true, "replicas": 2}})
	require.Error(t, err, "two replicas on SQLite")
	assert.Contains(t, err.Error(), "hub.replicas")

	objs = byKey(t, "the chart", renderChart(t, map[string]any{"hub": map[string]any{"enabled": true, "tls": map[string]any{"selfSigned": true}}}))
	const secret = "v1/Secret kerf-hub/kerf-hub-tls"
	require.Contains(t, objs, secret)
	assert.Equal(t, "kubernetes.io/tls", objs[secret].Object["type"])
	crt, _, _ := unstructured.NestedString(objs[secret].Object, "data", "tls.crt")
	der, err := base64.StdEncoding.DecodeString(crt)
	require.NoError(t, err)
	block, _ := pem.Decode(der)
	require.NotNil(t, block, "tls.crt is PEM")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.NoError(t, cert.VerifyHostname("kerf-hub.kerf-hub.svc"))
	assert.NoError(t, cert.VerifyHostname("kerf-hub.kerf-hub.svc.cluster.local"))
}

// TestValuesReachTheirFields: each value the chart documents changes the
// field it names, so a value the templates ignore fails here.
func TestValuesReachTheirFields(t *testing.T) {
	vals := map[string]any{
		"agent": map[string]any{
			"image":     map[string]any{"repository": "registry.example/kerf-agent", "tag": "v1.2.3", "pullPolicy": "Always"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "64Mi"}, "limits": map[string]any{"memory": "256Mi"}},
		},
		"leader": map[string]any{
			"image":               map[string]any{"repository": "registry.example/kerf-leader", "tag": "v1.2.3", "pullPolicy": "Never"},
			"replicas":            3,
			"resources":           map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}},
			"protectedNamespaces": []any{"kube-system", "shop"},
		},
		"webhook":       map[string]any{"excludedNamespaces": []any{"kube-system", "kerf-system", "batch"}},
		"defaultPolicy": map[string]any{"excludedNamespaces": []any{"kube-system"}, "guardrails": map[string]any{"paused": true, "rollback": map[string]any{"oomKills": 2}}},
	}
	objs := byKey(t, "the chart", renderChart(t, vals))
	get := func(k string, fields ...string) any {
		t.Helper()
		o, ok := objs[k]
		require.True(t, ok, "no %s", k)
		v, found, err := unstructured.NestedFieldNoCopy(o.Object, fields...)
		require.NoError(t, err)
		require.True(t, found, "%s: no %v", k, fields)
		return v
	}
	container := func(k string) map[string]any {
		t.Helper()
		cs := get(k, "spec", "template", "spec", "containers").([]any)
		require.Len(t, cs, 1)
		return cs[0].(map[string]any)
	}
	agent := container("apps/v1/DaemonSet kerf-system/kerf-agent")
	assert.Equal(t, "registry.example/kerf-agent:v1.2.3", agent["image"])
	assert.Equal(t, "Always", agent["imagePullPolicy"])
	assert.Equal(t, vals["agent"].(map[string]any)["resources"], agent["resources"])
	leader := container("apps/v1/Deployment kerf-system/kerf-leader")
	assert.Equal(t, "registry.example/kerf-leader:v1.2.3", leader["image"])
	assert.Equal(t, "Never", leader["imagePullPolicy"])
	assert.Equal(t, vals["leader"].(map[string]any)["resources"], leader["resources"])
	assert.EqualValues(t, 3, get("apps/v1/Deployment kerf-system/kerf-leader", "spec", "replicas"))
	assert.Contains(t, leader["args"], "--protected-namespaces=kube-system,shop")

	hook := get("admissionregistration.k8s.io/v1/MutatingWebhookConfiguration /kerf", "webhooks").([]any)[0].(map[string]any)
	exprs := hook["namespaceSelector"].(map[string]any)["matchExpressions"].([]any)
	assert.Equal(t, []any{"kube-system", "kerf-system", "batch"}, exprs[0].(map[string]any)["values"])

	const policy = "kerf.dev/v1alpha1/ClusterRightsizingPolicy /default"
	assert.Equal(t, []any{"kube-system"},
		get(policy, "spec", "selector", "namespaceSelector", "matchExpressions").([]any)[0].(map[string]any)["values"])
	assert.Equal(t, true, get(policy, "spec", "guardrails", "paused"))
	// Helm merges the values given with the defaults: the rest stays.
	assert.EqualValues(t, 2, get(policy, "spec", "guardrails", "rollback", "oomKills"))
	assert.Equal(t, "0.25", get(policy, "spec", "guardrails", "rollback", "throttlingRatio"))

	// A digest pins the image over the tag (issue 30, item 19).
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pinned := byKey(t, "the chart", renderChart(t, map[string]any{
		"agent":  map[string]any{"image": map[string]any{"tag": "v1.2.3", "digest": digest}},
		"leader": map[string]any{"image": map[string]any{"digest": digest}},
	}))
	objs = pinned
	assert.Equal(t, "kerf.local/kerf-agent@"+digest, container("apps/v1/DaemonSet kerf-system/kerf-agent")["image"])
	assert.Equal(t, "kerf.local/kerf-leader@"+digest, container("apps/v1/Deployment kerf-system/kerf-leader")["image"])

	// An empty list protects none.
	objs = byKey(t, "the chart", renderChart(t, map[string]any{"leader": map[string]any{"protectedNamespaces": []any{}}}))
	assert.Contains(t, container("apps/v1/Deployment kerf-system/kerf-leader")["args"], "--protected-namespaces=")

	off := byKey(t, "the chart", renderChart(t, map[string]any{"defaultPolicy": map[string]any{"enabled": false}}))
	assert.NotContains(t, off, policy, "defaultPolicy.enabled=false")
}

// TestLintClean: `helm lint --strict charts/kerf` reports no error and no
// warning, with the default values and with the hub on. Lint's INFO
// messages are logged (the one Helm gives this chart: no icon).
func TestLintClean(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"hub":      {"hub": map[string]any{"enabled": true, "forward": map[string]any{"enabled": true}}},
		"postgres": {"hub": map[string]any{"enabled": true, "replicas": 3, "postgres": map[string]any{"existingSecret": "db"}}},
	} {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.KubeVersion, _ = chartutil.ParseKubeVersion(kube.KubernetesVersion)
			res := l.Run([]string{chartDir(t)}, vals)
			assert.Equal(t, 1, res.TotalChartsLinted)
			assert.Empty(t, res.Errors, "helm lint errors")
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

// leaderArgs returns the kerf-leader container's arguments in a rendered
// manifest.
func leaderArgs(t *testing.T, manifest string) []string {
	t.Helper()
	objs := byKey(t, "the chart", parse(t, manifest))
	d, ok := objs["apps/v1/Deployment kerf-system/kerf-leader"]
	require.True(t, ok, "no kerf-leader Deployment")
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	args, _, err := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	require.NoError(t, err)
	return args
}

// TestThrottlingSourceValuesSetTheLeaderFlags: leader.metricsURL gives
// --metrics-url, leader.cadvisorFallback=false drops --cadvisor-fallback,
// and values from a chart without the key (helm upgrade --reuse-values
// replaces the new chart's defaults with the old release's) keep the
// fallback on, as before.
func TestThrottlingSourceValuesSetTheLeaderFlags(t *testing.T) {
	const url = "http://prometheus-operated.monitoring.svc:9090"
	for _, tc := range []struct {
		name      string
		leader    map[string]any
		want, not []string
	}{
		{"defaults", nil, []string{"--cadvisor-fallback"}, []string{"--metrics-url"}},
		{"prometheus", map[string]any{"metricsURL": url}, []string{"--metrics-url=" + url, "--cadvisor-fallback"}, nil},
		{"prometheus only", map[string]any{"metricsURL": url, "cadvisorFallback": false}, []string{"--metrics-url=" + url}, []string{"--cadvisor-fallback"}},
		{"neither", map[string]any{"cadvisorFallback": false}, nil, []string{"--cadvisor-fallback", "--metrics-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if tc.leader != nil {
				vals = map[string]any{"leader": tc.leader}
			}
			args := leaderArgs(t, renderManifest(t, vals))
			for _, w := range tc.want {
				assert.Contains(t, args, w)
			}
			for _, n := range tc.not {
				for _, a := range args {
					assert.False(t, strings.HasPrefix(a, n), "%s in %v", n, args)
				}
			}
		})
	}

	t.Run("reused values without the key", func(t *testing.T) {
		c := loadChart(t)
		leader := c.Values["leader"].(map[string]any)
		delete(leader, "cadvisorFallback")
		delete(leader, "metricsURL")
		inst := action.NewInstall(&action.Configuration{})
		inst.ClientOnly, inst.DryRun, inst.ReleaseName, inst.Namespace = true, true, "kerf", "default"
		inst.DisableOpenAPIValidation = true
		rel, err := inst.Run(c, nil)
		require.NoError(t, err)
		args := leaderArgs(t, rel.Manifest)
		assert.Contains(t, args, "--cadvisor-fallback")
		assert.NotContains(t, strings.Join(args, " "), "--metrics-url")
	})
}

// TestHubValuesReachTheirFields: each hub value changes the field it
// names, so a hub value the templates ignore fails here.
func TestHubValuesReachTheirFields(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	resources := map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}}
	objs := byKey(t, "the chart", renderChart(t, map[string]any{"hub": map[string]any{
		"enabled":   true,
		"image":     map[string]any{"repository": "registry.example/kerf-hub", "tag": "v1.2.3", "digest": digest, "pullPolicy": "Always"},
		"replicas":  3,
		"resources": resources,
		"tls":       map[string]any{"secretName": "hub-serving"},
		"postgres":  map[string]any{"existingSecret": "hub-db", "key": "dsn"},
		"forward":   map[string]any{"enabled": true, "url": "https://hub.example:443", "clientSecret": "hub-client"},
	}}))
	const dep = "apps/v1/Deployment kerf-hub/kerf-hub"
	require.Contains(t, objs, dep)
	replicas, _, _ := unstructured.NestedFieldNoCopy(objs[dep].Object, "spec", "replicas")
	assert.EqualValues(t, 3, replicas)
	cs, _, _ := unstructured.NestedSlice(objs[dep].Object, "spec", "template", "spec", "containers")
	require.Len(t, cs, 1)
	hub := cs[0].(map[string]any)
	assert.Equal(t, "registry.example/kerf-hub@"+digest, hub["image"])
	assert.Equal(t, "Always", hub["imagePullPolicy"])
	assert.Equal(t, resources, hub["resources"])
	assert.Equal(t, map[string]any{"name": "KERF_HUB_DATABASE", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "hub-db", "key": "dsn"}}},
		hub["env"].([]any)[0])
	vols, _, _ := unstructured.NestedSlice(objs[dep].Object, "spec", "template", "spec", "volumes")
	assert.Contains(t, vols, map[string]any{"name": "tls", "secret": map[string]any{"secretName": "hub-serving"}})
	assert.Contains(t, objs, "policy/v1/PodDisruptionBudget kerf-hub/kerf-hub", "several replicas on PostgreSQL")
	assert.NotContains(t, objs, "v1/PersistentVolumeClaim kerf-hub/kerf-hub-data", "no claim on PostgreSQL")

	leader := objs["apps/v1/Deployment kerf-system/kerf-leader"]
	require.NotNil(t, leader)
	lcs, _, _ := unstructured.NestedSlice(leader.Object, "spec", "template", "spec", "containers")
	assert.Contains(t, lcs[0].(map[string]any)["args"], "--hub-url=https://hub.example:443")
	lvols, _, _ := unstructured.NestedSlice(leader.Object, "spec", "template", "spec", "volumes")
	require.NotEmpty(t, lvols)
	assert.Equal(t, "hub-client", lvols[0].(map[string]any)["secret"].(map[string]any)["secretName"], "the leader's Secret for the hub")
}
