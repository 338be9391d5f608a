package helm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/internal/kube"
)

// renderError is `helm template` with vals: the error Helm gives, nil
// when the chart renders.
func renderError(t *testing.T, vals map[string]any) error {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.ReleaseName, inst.Namespace = true, true, "kerf", "default"
	_, err := inst.Run(loadChart(t), vals)
	return err
}

// TestSchemaRefusesUnknownAndMistypedValues: values.schema.json makes
// `helm install`, `template` and `lint --strict` refuse a typo'd key, a
// value of the wrong type and one outside its allowed values, each with
// a message naming the field. Without the schema Helm renders them all.
func TestSchemaRefusesUnknownAndMistypedValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yaml  string
		wants []string // in the error
	}{
		{"typo'd key", "leader: {protectedNamespace: [shop]}", []string{"leader", "protectedNamespace"}},
		{"typo'd top-level key", "leaders: {replicas: 3}", []string{"leaders"}},
		{"wrong type", "leader: {replicas: two}", []string{"/leader/replicas", "integer"}},
		{"below the minimum", "leader: {replicas: 0}", []string{"/leader/replicas", "minimum"}},
		{"not a boolean", "leader: {cadvisorFallback: \"no\"}", []string{"/leader/cadvisorFallback", "boolean"}},
		{"not a URL", "leader: {metricsURL: prometheus:9090}", []string{"/leader/metricsURL"}},
		{"pull policy", "agent: {image: {pullPolicy: Sometimes}}", []string{"/agent/image/pullPolicy", "IfNotPresent"}},
		{"digest", "agent: {image: {digest: latest}}", []string{"/agent/image/digest"}},
		{"quantity", "agent: {resources: {limits: {memory: lots}}}", []string{"/agent/resources/limits/memory"}},
		{"resources typo", "leader: {resources: {limit: {memory: 1Gi}}}", []string{"/leader/resources", "limit"}},
		{"namespace name", "webhook: {excludedNamespaces: [Kube_System]}", []string{"/webhook/excludedNamespaces/0"}},
		{"toleration", "agent: {tolerations: [{operator: Maybe}]}", []string{"/agent/tolerations/0/operator"}},
		{"seccomp", "agent: {seccompProfile: {type: Off}}", []string{"/agent/seccompProfile/type"}},
		{"guardrail typo", "defaultPolicy: {guardrails: {rollback: {oomKill: 2}}}", []string{"/defaultPolicy/guardrails/rollback", "oomKill"}},
		{"guardrail enum", "defaultPolicy: {guardrails: {rollback: {restoreTo: Yesterday}}}", []string{"/defaultPolicy/guardrails/rollback/restoreTo", "LastHealthy"}},
		{"guardrail minimum", "defaultPolicy: {guardrails: {rollback: {restarts: -1}}}", []string{"/defaultPolicy/guardrails/rollback/restarts"}},
		{"hub storage type", "hub: {storage: {type: NFS}}", []string{"/hub/storage/type", "EmptyDir"}},
		{"hub storage size", "hub: {storage: {size: big}}", []string{"/hub/storage/size"}},
		{"hub postgres typo", "hub: {postgres: {secret: db}}", []string{"/hub/postgres", "secret"}},
		{"hub forward url", "hub: {forward: {url: \"http://kerf-hub:9443\"}}", []string{"/hub/forward/url"}},
		{"0.1.0's hub.url", "hub: {url: \"https://kerf-hub:9443\"}", []string{"hub", "url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(tc.yaml), &vals))
			err := renderError(t, vals)
			require.Error(t, err, "helm template with %s", tc.yaml)
			for _, w := range tc.wants {
				assert.Contains(t, err.Error(), w)
			}
			t.Log(err)

			l := action.NewLint()
			l.Strict = true
			l.KubeVersion, _ = chartutil.ParseKubeVersion(kube.KubernetesVersion)
			res := l.Run([]string{chartDir(t)}, vals)
			assert.NotEmpty(t, res.Errors, "helm lint --strict with %s", tc.yaml)
		})
	}
}

// schemaAt returns the schema of the value at path in schema s, following
// $ref into s's definitions; ok is false when the schema does not define
// it.
func schemaAt(root, s map[string]any, path []string) (map[string]any, bool) {
	for {
		r, ok := s["$ref"].(string)
		if !ok {
			break
		}
		s, _ = root["definitions"].(map[string]any)[strings.TrimPrefix(r, "#/definitions/")].(map[string]any)
	}
	if len(path) == 0 {
		return s, true
	}
	if path[0] == "[]" {
		items, ok := s["items"].(map[string]any)
		if !ok {
			return nil, false
		}
		return schemaAt(root, items, path[1:])
	}
	if props, ok := s["properties"].(map[string]any); ok {
		if p, ok := props[path[0]].(map[string]any); ok {
			return schemaAt(root, p, path[1:])
		}
	}
	// A map (resources' requests and limits): any key, one schema.
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		return schemaAt(root, ap, path[1:])
	}
	return nil, false
}

// valuePaths lists the path of every value in v, maps' keys and lists'
// items ("[]") alike, parents before children.
func valuePaths(prefix []string, v any) [][]string {
	var out [][]string
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := append(slices.Clone(prefix), k)
			out = append(out, p)
			out = append(out, valuePaths(p, c)...)
		}
	case []any:
		for _, c := range v {
			out = append(out, valuePaths(append(slices.Clone(prefix), "[]"), c)...)
		}
	}
	return out
}

func readSchema(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	require.NoError(t, err)
	var s map[string]any
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// TestSchemaDefinesEveryValue: every key of values.yaml, at every depth,
// has its schema (a value added to values.yaml and not to the schema
// would be refused as unknown: this says which), and the defaults pass.
func TestSchemaDefinesEveryValue(t *testing.T) {
	s := readSchema(t)
	c := loadChart(t)
	paths := valuePaths(nil, c.Values)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		_, ok := schemaAt(s, s, p)
		assert.True(t, ok, "values.yaml's %s is not in values.schema.json", strings.Join(p, "."))
	}
	assert.NoError(t, chartutil.ValidateAgainstSchema(c, c.Values), "the default values")
}

// crdSchemaToJSONSchema turns a CRD's OpenAPI v3 schema into draft-07's:
// the structure and the checks JSON Schema has (types, enums, bounds,
// required), every object closed to unknown keys. Descriptions, defaults
// and the CEL rules stay with the CRD, which the apiserver applies.
func crdSchemaToJSONSchema(n map[string]any) map[string]any {
	o := map[string]any{}
	for _, k := range []string{"type", "required", "enum", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern"} {
		if v, ok := n[k]; ok {
			o[k] = v
		}
	}
	if n["x-kubernetes-int-or-string"] == true {
		o["type"] = []any{"integer", "string"}
	}
	if props, ok := n["properties"].(map[string]any); ok {
		out := map[string]any{}
		for k, v := range props {
			out[k] = crdSchemaToJSONSchema(v.(map[string]any))
		}
		o["properties"] = out
		o["additionalProperties"] = false
	} else if ap, ok := n["additionalProperties"].(map[string]any); ok {
		o["additionalProperties"] = crdSchemaToJSONSchema(ap)
	}
	if items, ok := n["items"].(map[string]any); ok {
		o["items"] = crdSchemaToJSONSchema(items)
	}
	return o
}

// TestSchemaGuardrailsAreTheCRDs: defaultPolicy.guardrails in the schema
// is the ClusterRightsizingPolicy CRD's spec.guardrails, so a field added
// to the CRD is accepted by the chart and a typo is refused before the
// apiserver would drop it with a warning. After the CRD changes:
// KERF_UPDATE_SCHEMA=1 go test -run TestSchemaGuardrailsAreTheCRDs ./test/helm/
func TestSchemaGuardrailsAreTheCRDs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "manifests", "crd", "kerf.dev_clusterrightsizingpolicies.yaml"))
	require.NoError(t, err)
	var crd map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &crd))
	version := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	root := version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	guardrails, ok := schemaAt(root, root, []string{"spec", "guardrails"})
	require.True(t, ok, "the CRD has no spec.guardrails")
	want := crdSchemaToJSONSchema(guardrails)
	// Through JSON, as the file is read: numbers become float64.
	b, err := json.Marshal(want)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &want))

	s := readSchema(t)
	defs := s["definitions"].(map[string]any)
	if os.Getenv("KERF_UPDATE_SCHEMA") == "1" {
		defs["guardrails"] = want
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(s))
		require.NoError(t, os.WriteFile(filepath.Join(chartDir(t), "values.schema.json"), out.Bytes(), 0o644))
		return
	}
	assert.Equal(t, want, defs["guardrails"],
		"values.schema.json's guardrails are not the CRD's: KERF_UPDATE_SCHEMA=1 go test -run TestSchemaGuardrailsAreTheCRDs ./test/helm/")
}
