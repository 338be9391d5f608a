package dashboards

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

// Dashboard is the part of a Grafana dashboard JSON the tests read.
type Dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is one panel of the dashboard.
type Panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource"`
	Targets    []Target    `json:"targets"`
}

// Datasource names a panel's or a target's data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *Datasource `json:"datasource"`
}

// Variable is one templating variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Regex      string          `json:"regex"`
	Datasource *Datasource     `json:"datasource"`
	AllValue   string          `json:"allValue"`
}

// repo returns the repository's root.
func repo(t testing.TB) string {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	return root
}

// loadDashboard parses dashboards/kerf.json, unknown fields allowed (the
// struct holds only what the tests read).
func loadDashboard(t testing.TB) Dashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo(t), "dashboards", "kerf.json"))
	require.NoError(t, err)
	var d Dashboard
	require.NoError(t, json.Unmarshal(raw, &d), "dashboards/kerf.json")
	return d
}

// loadRules decodes alerts/kerf-rules.yaml strictly into the Prometheus
// Operator's PrometheusRule.
func loadRules(t testing.TB) *monitoringv1.PrometheusRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo(t), "alerts", "kerf-rules.yaml"))
	require.NoError(t, err)
	var pr monitoringv1.PrometheusRule
	require.NoError(t, yaml.UnmarshalStrict(raw, &pr), "alerts/kerf-rules.yaml as a PrometheusRule")
	require.Equal(t, "monitoring.coreos.com/v1", pr.APIVersion)
	require.Equal(t, "PrometheusRule", pr.Kind)
	return &pr
}

// metricName finds the metric names of a PromQL expression: Kerf's
// (kerf_*), the agent's cadvisor names (container_*) and up.
var metricName = regexp.MustCompile(`\b(kerf_[a-z_]+|container_[a-z_]+|up)\b`)

// metricsIn returns the metric names expr uses.
func metricsIn(expr string) []string {
	var out []string
	for _, m := range metricName.FindAllString(expr, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// exported returns the metric names the code registers: every quoted
// kerf_* or container_* name in a non-test Go file outside test/.
func exported(t testing.TB) map[string]bool {
	t.Helper()
	root := repo(t)
	names := map[string]bool{"up": true} // Prometheus' own, per target
	quoted := regexp.MustCompile(`"((?:kerf|container)_[a-z_]+)"`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, p); rel == "test" || rel == "bin" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// metricOf is the metric a series name belongs to: a histogram's
// name_bucket, name_sum and name_count are name's.
func metricOf(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if m, ok := strings.CutSuffix(name, suffix); ok {
			return m
		}
	}
	return name
}

// TestTheDashboardIsValid parses the dashboard: every panel but the rows
// has the ${datasource} Prometheus variable and at least one query, every
// query a metric the code exports, and the variables are those the
// queries use.
func TestTheDashboardIsValid(t *testing.T) {
	d := loadDashboard(t)
	assert.Equal(t, "kerf-overview", d.UID)
	assert.GreaterOrEqual(t, d.SchemaVersion, 39, "schemaVersion of Grafana 11")
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	require.Contains(t, vars, "datasource")
	assert.Equal(t, "datasource", vars["datasource"].Type)
	assert.JSONEq(t, `"prometheus"`, string(vars["datasource"].Query))
	for _, name := range []string{"namespace", "workload"} {
		require.Contains(t, vars, name)
		v := vars[name]
		assert.Equal(t, "query", v.Type, name)
		require.NotNil(t, v.Datasource, name)
		assert.Equal(t, "${datasource}", v.Datasource.UID, name)
		assert.Equal(t, ".*", v.AllValue, name)
	}
	names := exported(t)
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			assert.Empty(t, p.Targets, "row %q", p.Title)
			continue
		}
		require.NotNil(t, p.Datasource, "panel %q has no datasource", p.Title)
		assert.Equal(t, Datasource{Type: "prometheus", UID: "${datasource}"}, *p.Datasource, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no targets", p.Title)
		for _, tg := range p.Targets {
			queries++
			assert.NotEmpty(t, tg.RefID, "panel %q", p.Title)
			require.NotNil(t, tg.Datasource, "panel %q target %s", p.Title, tg.RefID)
			assert.Equal(t, "${datasource}", tg.Datasource.UID, "panel %q target %s", p.Title, tg.RefID)
			ms := metricsIn(tg.Expr)
			assert.NotEmpty(t, ms, "panel %q target %s: %s", p.Title, tg.RefID, tg.Expr)
			for _, m := range ms {
				assert.True(t, names[m] || names[metricOf(m)], "panel %q uses %s, which no Go file outside test/ exports", p.Title, m)
			}
		}
	}
	assert.Greater(t, queries, 20)
}

// TestTheAlertRulesPassPromtool checks each rule has what its page needs
// (for, severity, summary, description, a runbook in docs/monitoring.md)
// and runs Debian's promtool over the rule groups.
func TestTheAlertRulesPassPromtool(t *testing.T) {
	pr := loadRules(t)
	doc, err := os.ReadFile(filepath.Join(repo(t), "docs", "monitoring.md"))
	require.NoError(t, err)
	names := exported(t)
	want := []string{"KerfRollbackStorm", "KerfWorkloadDegraded", "KerfAgentDown", "KerfAgentStreamDisconnected", "KerfHubUndeliveredGrowing", "KerfWebhookErrors"}
	var got []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s has a recording rule", g.Name)
			got = append(got, r.Alert)
			require.NotNil(t, r.For, r.Alert)
			assert.NotEmpty(t, string(*r.For), "%s has no for", r.Alert)
			assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			assert.NotEmpty(t, r.Annotations["description"], r.Alert)
			_, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "docs/monitoring.md#")
			require.True(t, ok, "%s: runbook_url is not in docs/monitoring.md", r.Alert)
			assert.Equal(t, strings.ToLower(r.Alert), anchor, r.Alert)
			assert.Contains(t, string(doc), "\n### "+r.Alert+"\n", "%s has no runbook section in docs/monitoring.md", r.Alert)
			for _, m := range metricsIn(r.Expr.String()) {
				assert.True(t, names[m] || names[metricOf(m)], "%s uses %s, which no Go file outside test/ exports", r.Alert, m)
			}
		}
	}
	for _, w := range want {
		assert.Contains(t, got, w)
	}
	const promtool = "/usr/bin/promtool"
	if _, err := os.Stat(promtool); err != nil {
		if controlplane.Required() {
			t.Fatalf("needs Debian's promtool (package prometheus, make deps): %v", err)
		}
		t.Skipf("needs Debian's promtool (package prometheus, make deps): %v", err)
	}
	// promtool reads the rule groups alone, not the PrometheusRule around
	// them.
	groups, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(file, groups, 0o600))
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	assert.Contains(t, string(out), "SUCCESS")
}

// TestTheMonitoringComponentScrapesTheAgentsAndTheLeader renders the
// install with manifests/monitoring as a user's kustomization would and
// checks the PodMonitors (decoded strictly into the Prometheus Operator's
// types) select the agent's and the leader's pods and name their metrics
// ports, scrape with the token of a service account bound to
// kerf-metrics-reader, and that the default install has none of it.
func TestTheMonitoringComponentScrapesTheAgentsAndTheLeader(t *testing.T) {
	for _, u := range kustomizetest.Objects(t, kustomizetest.Manifests(t)) {
		assert.NotEqual(t, "monitoring.coreos.com", u.GroupVersionKind().Group, "the default install has %s %s", u.GetKind(), u.GetName())
	}
	objs := kustomizetest.Objects(t, kustomizetest.Overlay(t, []string{"."}, "monitoring"))

	var agent appsv1.DaemonSet
	kustomizetest.Object(t, objs, "DaemonSet", "kerf-agent", &agent)
	var leader appsv1.Deployment
	kustomizetest.Object(t, objs, "Deployment", "kerf-leader", &leader)
	var secret corev1.Secret
	kustomizetest.Object(t, objs, "Secret", "kerf-metrics-scraper-token", &secret)
	assert.Equal(t, corev1.SecretTypeServiceAccountToken, secret.Type)
	sa := secret.Annotations[corev1.ServiceAccountNameKey]
	var binding rbacv1.ClusterRoleBinding
	kustomizetest.Object(t, objs, "ClusterRoleBinding", "kerf-metrics-scraper", &binding)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kerf-metrics-reader"}, binding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: secret.Namespace}}, binding.Subjects)
	var role rbacv1.ClusterRole
	kustomizetest.Object(t, objs, "ClusterRole", "kerf-metrics-reader", &role)

	for _, c := range []struct {
		monitor, job, port string
		pod                corev1.PodTemplateSpec
		honorLabels        bool
	}{
		{"kerf-agent", "kerf-agent", "metrics", agent.Spec.Template, true},
		{"kerf-leader", "kerf-leader", "https", leader.Spec.Template, false},
	} {
		var pm monitoringv1.PodMonitor
		kustomizetest.Object(t, objs, "PodMonitor", c.monitor, &pm)
		assert.Equal(t, agent.Namespace, pm.Namespace, c.monitor)
		assert.Equal(t, []string{agent.Namespace}, pm.Spec.NamespaceSelector.MatchNames, c.monitor)
		for k, v := range pm.Spec.Selector.MatchLabels {
			assert.Equal(t, v, c.pod.Labels[k], "%s selects label %s=%s, the pods have %q", c.monitor, k, v, c.pod.Labels[k])
		}
		require.Len(t, pm.Spec.PodMetricsEndpoints, 1, c.monitor)
		ep := pm.Spec.PodMetricsEndpoints[0]
		require.NotNil(t, ep.Port, c.monitor)
		var ports []string
		for _, ctr := range c.pod.Spec.Containers {
			for _, p := range ctr.Ports {
				ports = append(ports, p.Name)
			}
		}
		assert.Equal(t, c.port, *ep.Port, c.monitor)
		assert.Contains(t, ports, *ep.Port, c.monitor)
		require.NotNil(t, ep.Authorization, "%s scrapes without a token: /metrics asks for one", c.monitor)
		assert.Equal(t, "Bearer", ep.Authorization.Type, c.monitor)
		require.NotNil(t, ep.Authorization.Credentials, c.monitor)
		assert.Equal(t, secret.Name, ep.Authorization.Credentials.Name, c.monitor)
		assert.Equal(t, "token", ep.Authorization.Credentials.Key, c.monitor)
		assert.Equal(t, c.honorLabels, ep.HonorLabels, c.monitor)
		var job, node bool
		for _, r := range ep.RelabelConfigs {
			job = job || r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == c.job
			node = node || r.TargetLabel == "node" && slices.Contains(r.SourceLabels, "__meta_kubernetes_pod_node_name")
		}
		assert.True(t, job, "%s sets job=%s, the alerts' and the dashboard's", c.monitor, c.job)
		assert.True(t, node, "%s labels its targets with the node", c.monitor)
	}
	var pr monitoringv1.PrometheusRule
	kustomizetest.Object(t, objs, "PrometheusRule", "kerf", &pr)
	assert.Equal(t, loadRules(t).Spec, pr.Spec, "the component's PrometheusRule is alerts/kerf-rules.yaml")
}
