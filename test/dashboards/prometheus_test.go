package dashboards

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/test/agenttest"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kerneltest"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/promtest"
	"github.com/kerf-dev/kerf/test/streamtest"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

const (
	agentSA  = "kerf-agent"
	audience = "kerf-leader"
	// rateInterval and rangeInterval stand for Grafana's $__rate_interval
	// and $__range: a minute holds 60 samples at the 1 s scrape.
	rateInterval  = "1m"
	rangeInterval = "5m"
)

// noData are the metrics that have no series in this setup, and why: a
// query over them only is checked to parse and its metric names to be
// exported by the code (TestTheDashboardIsValid); every other query must
// return a series. Each is a CounterVec without preset labels, so its
// first series comes with its first event.
var noData = map[string]string{
	"kerf_actions_total": "its first series is the leader's first action; a rollback here would take a watched workload whose pods " +
		"breach and a controller-manager to roll them (the cluster package's tests do that on its own reconciler)",
	"kerf_stream_dropped_reports_total":     "its first series is the first report the leader drops (a pod on another node or unknown)",
	"kerf_recommender_vpa_skipped_total":    "its first series is the first workload whose policy takes its targets from a VerticalPodAutoscaler",
	"kerf_webhook_skipped_containers_total": "its first series is the first container whose applied values would make its pod invalid",
	// The savings metrics have a series per namespace with a
	// recommendation; the cluster package's
	// TestTheLeaderExportsWhatItsChangesSavedPerNamespace checks their
	// figures on a rollback its own reconciler makes.
	"kerf_savings_cpu_cores":           savingsNoData,
	"kerf_savings_memory_bytes":        savingsNoData,
	"kerf_savings_rollbacks":           savingsNoData,
	"kerf_savings_oom_kills":           savingsNoData,
	"kerf_savings_unrecorded_requests": savingsNoData,
	"kerf_savings_workloads":           savingsNoData,
}

// savingsNoData is why the savings metrics have no series here.
const savingsNoData = "its first series is the first namespace with a RightsizingRecommendation, made here only after the panels' queries"

// rig is a real agent and a real leader scraped by a real Prometheus.
type rig struct {
	prom, ns, node, agentPod string
	agent                    *agenttest.Process
	stopLeader               func()
}

// start runs it all: a node of two fixture pods (one container each, the
// first busy under a CFS quota so it is throttled) on real v1 cgroups, the
// kerf-agent binary over them streaming to the leader, the leader in this
// process (stream, webhook, recommender, hub releaser, /metrics), and
// Prometheus scraping both every second as a service account bound to
// kerf-metrics-reader, with the labels manifests/monitoring gives the
// targets.
func start(t *testing.T) *rig {
	root, mounts := agenttest.Cgroups(t, "kerf-dash")
	cp := controlplane.Get(t)
	cs := cp.Clientset
	ctx := t.Context()
	r := &rig{ns: controlplane.UniqueName("kerf-dash"), node: controlplane.UniqueName("kerf-dash-node")}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentSA}}, metav1.CreateOptions{})
	require.NoError(t, err)
	bin := agenttest.BuildAgent(t)
	n := agenttest.NewNode(t, cs, r.node, r.ns, root, mounts, 2, 1)
	busy := n.Containers[0]
	kerneltest.WriteFile(t, busy.Dirs[0], "cpu.cfs_period_us", "100000")
	kerneltest.WriteFile(t, busy.Dirs[0], "cpu.cfs_quota_us", "2000")
	agenttest.BusyLoop(t, busy.Dirs)

	// The leader, as kerf-leader wires it, on loopback.
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return ln
	}
	streamCert := cert.Options{Namespace: r.ns, ServiceName: "kerf-leader", SecretName: "kerf-leader-cert", ExtraHosts: []string{"127.0.0.1"}}
	_, _, streamCA, err := cert.EnsureSelfManaged(ctx, cp.Client, streamCert)
	require.NoError(t, err)
	webhookCert := cert.Options{Namespace: r.ns, ServiceName: "kerf-webhook", SecretName: "kerf-webhook-cert", ExtraHosts: []string{"127.0.0.1"}}
	_, _, webhookCA, err := cert.EnsureSelfManaged(ctx, cp.Client, webhookCert)
	require.NoError(t, err)
	metricsLn, streamLn, webhookLn := listen(), listen(), listen()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	l, err := cluster.New(cluster.Config{
		Namespace: r.ns, LeaseName: "kerf-leader", Identity: "kerf-leader-0", WatchNamespaces: []string{r.ns},
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Listener: metricsLn,
		Stream: cluster.StreamConfig{Listener: streamLn, Cert: cert.Source{SelfManaged: streamCert},
			Audience: audience, ServiceAccountNamespace: r.ns, ServiceAccountName: agentSA},
		Webhook: cluster.WebhookConfig{Listener: webhookLn, Cert: cert.Source{SelfManaged: webhookCert},
			ClientAuth: webhook.ClientAuth{AllowUnauthenticated: true}},
	}, cp.Config, log)
	require.NoError(t, err)
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	stopped := false
	r.stopLeader = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done, "the leader's Run")
		}
	}
	t.Cleanup(r.stopLeader)

	// The agent binary, streaming to it.
	dir := t.TempDir()
	caFile := filepath.Join(dir, "leader-ca.pem")
	require.NoError(t, os.WriteFile(caFile, streamCA, 0o600))
	r.agentPod = "kerf-agent-" + r.node
	agentPod := agenttest.AgentPod(t, cs, r.ns, r.agentPod, r.node, agentSA)
	tokenFile := filepath.Join(dir, "agent-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(t, cs, r.ns, agentSA, audience, agentPod)), 0o600))
	authtest.InstallReaderRoles(t, cp)
	scraper := authtest.NewCaller(t, cp, r.ns, "prometheus")
	scraper.BindCluster(t, cp, authtest.MetricsReader)
	r.agent = agenttest.Start(t, bin, []string{
		"--discovery=apiserver", "--kubeconfig=" + cp.Kubeconfig, "--node-name=" + r.node,
		"--interval=1s", "--usage-interval=1s", "--oom-source=auto",
		"--cgroup-driver=cgroupfs", "--kubelet-cgroup-root=" + root, "--cgroup-root=" + root + "/kubepods",
		"--leader-addr=" + streamLn.Addr().String(), "--leader-ca=" + caFile, "--token-file=" + tokenFile,
	}, agenttest.Options{Name: "kerf-agent", AddrFlag: "--metrics-addr=", Token: scraper.Token})
	r.agent.WaitTracked(t, len(n.Containers), time.Minute)
	// A second agent whose token is for another audience: the leader
	// refuses its streams, so kerf_stream_errors_total has a series.
	forgedFile := filepath.Join(dir, "forged-token")
	require.NoError(t, os.WriteFile(forgedFile, []byte(streamtest.CreateToken(t, cs, r.ns, agentSA, "someone-else", agentPod)), 0o600))
	agenttest.Start(t, bin, []string{
		"--discovery=apiserver", "--kubeconfig=" + cp.Kubeconfig, "--node-name=" + r.node + "-forged",
		"--interval=1s", "--oom-source=auto",
		"--cgroup-driver=cgroupfs", "--kubelet-cgroup-root=" + root, "--cgroup-root=" + root + "/kubepods",
		"--leader-addr=" + streamLn.Addr().String(), "--leader-ca=" + caFile, "--token-file=" + forgedFile,
	}, agenttest.Options{Name: "kerf-agent-forged", AddrFlag: "--metrics-addr=", Token: scraper.Token})

	// One admission review, so kerf_webhook_injections_total has a series.
	review(t, "https://"+webhookLn.Addr().String()+webhook.Path, webhookCA, r.ns)

	scraperToken := filepath.Join(dir, "prometheus-token")
	require.NoError(t, os.WriteFile(scraperToken, []byte(scraper.Token), 0o600))
	r.prom = promtest.StartJobs(t, time.Second,
		promtest.Job{Name: "kerf-agent", Target: r.agent.Addr, TokenFile: scraperToken, HonorLabels: true,
			Labels: map[string]string{"node": r.node, "namespace": r.ns, "pod": r.agentPod, "container": "agent"}},
		promtest.Job{Name: "kerf-leader", Target: metricsLn.Addr().String(), TokenFile: scraperToken,
			Labels: map[string]string{"node": r.node, "namespace": r.ns, "pod": "kerf-leader-0", "container": "leader"}})
	// Ready when both targets have been up for three scrapes (a rate
	// needs two samples), the leader streams from the agent and a minute's
	// rate of the throttled container is there.
	for _, q := range []string{
		`count_over_time(up{job="kerf-agent"}[1m]) >= 3`, `count_over_time(up{job="kerf-leader"}[1m]) >= 3`,
		`kerf_stream_errors_total`,
		`kerf_stream_connected_agents == 1`, `kerf_agent_stream_state{state="connected"} == 1`,
		`kerf_webhook_injections_total`,
		`rate(container_cpu_cfs_throttled_periods_total{pod="` + busy.Pod + `"}[` + rateInterval + `]) > 0`,
	} {
		waitSeries(t, r.prom, q, 90*time.Second)
	}
	return r
}

// review sends the webhook an AdmissionReview of a pod with no workload
// behind it, as the apiserver would, until it answers 200.
func review(t *testing.T, u string, caPEM []byte, ns string) {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	pod, err := json.Marshal(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	})
	require.NoError(t, err)
	body, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "dashboards-test", Namespace: ns, Name: "lonely", Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: pod}},
	})
	require.NoError(t, err)
	var last string
	require.Eventually(t, func() bool {
		resp, err := hc.Post(u, "application/json", strings.NewReader(string(body)))
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = resp.Status + " " + string(b)
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 200*time.Millisecond, "the webhook never answered the review: %s", &last)
}

// answer is Prometheus' answer to an API call.
type answer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      json.RawMessage
}

// sample is one series of an instant query's answer.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// api calls Prometheus' HTTP API path with params and returns its answer.
func api(t testing.TB, prom, path string, params url.Values) answer {
	t.Helper()
	resp, err := http.Get(prom + path + "?" + params.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	var a answer
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a), "%s %v", path, params)
	return a
}

// query runs an instant query; a query Prometheus refuses fails t.
func query(t testing.TB, prom, q string) []sample {
	t.Helper()
	a := api(t, prom, "/api/v1/query", url.Values{"query": {q}})
	require.Equal(t, "success", a.Status, "query %s: %s: %s", q, a.ErrorType, a.Error)
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	require.NoError(t, json.Unmarshal(a.Data, &data))
	require.Equal(t, "vector", data.ResultType, q)
	return data.Result
}

// waitSeries waits until q returns a series, and returns them.
func waitSeries(t testing.TB, prom, q string, timeout time.Duration) []sample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s := query(t, prom, q); len(s) > 0 {
			return s
		}
		require.True(t, time.Now().Before(deadline), "%s returned no series within %v", q, timeout)
		time.Sleep(500 * time.Millisecond)
	}
}

// variable matches a dashboard variable in a query: $name or ${name} or
// ${name:format}.
var variable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$([A-Za-z_]\w*)`)

// substitute replaces the dashboard's variables in expr as Grafana would:
// the dashboard's own from vars (a regex, as the :regex format and an
// "All" of .* give), Grafana's intervals with this Prometheus' windows. A
// variable it does not know fails t.
func substitute(t testing.TB, expr string, vars map[string]string) string {
	t.Helper()
	return variable.ReplaceAllStringFunc(expr, func(m string) string {
		g := variable.FindStringSubmatch(m)
		name := g[1] + g[2]
		switch name {
		case "__rate_interval", "__interval":
			return rateInterval
		case "__range":
			return rangeInterval
		}
		v, ok := vars[name]
		require.True(t, ok, "unknown variable %s in %s", m, expr)
		return v
	})
}

// onlyNoData says whether every metric of expr is one of noData's, and
// why.
func onlyNoData(expr string) (string, bool) {
	var why []string
	for _, m := range metricsIn(expr) {
		w, ok := noData[m]
		if !ok {
			return "", false
		}
		why = append(why, m+": "+w)
	}
	return strings.Join(why, "; "), len(why) > 0
}

// TestEveryPanelQueryAndAlertRunsOnARealPrometheus runs every panel's
// every query on a Prometheus scraping a real agent and a real leader,
// first with every variable at "All" (.*), then with the namespace and
// the workload the variables' own queries find: each parses and returns a
// series (but for noData's metrics, which have none here), and with a
// workload chosen only that workload's. Then every alert expression
// evaluates, and the stream and agent alerts fire with the labels their
// annotations use when the leader stops and then the agent.
func TestEveryPanelQueryAndAlertRunsOnARealPrometheus(t *testing.T) {
	d := loadDashboard(t)
	rules := loadRules(t)
	r := start(t)

	// The variables' own queries: label_values(match, label), with the
	// workload variable's regex taking the workload from the pod name.
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), (\w+)\)$`)
	values := func(name string, set map[string]string) []string {
		m := labelValues.FindStringSubmatch(vars[name].Definition)
		require.NotNil(t, m, "variable %s: %q is not label_values(match, label)", name, vars[name].Definition)
		a := api(t, r.prom, "/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {substitute(t, m[1], set)}})
		require.Equal(t, "success", a.Status, "variable %s: %s", name, a.Error)
		var vals []string
		require.NoError(t, json.Unmarshal(a.Data, &vals))
		if re := vars[name].Regex; re != "" {
			rx := regexp.MustCompile(strings.TrimSuffix(strings.TrimPrefix(re, "/"), "/"))
			var out []string
			for _, v := range vals {
				if g := rx.FindStringSubmatch(v); len(g) > 1 {
					out = append(out, g[1])
				}
			}
			vals = out
		}
		return vals
	}
	all := map[string]string{"namespace": ".*", "workload": ".*"}
	assert.Contains(t, values("namespace", all), r.ns)
	workloads := values("workload", map[string]string{"namespace": r.ns})
	assert.ElementsMatch(t, []string{"app-000", "app-001"}, workloads, "the workload variable takes the Deployment's name from its pods' names")
	one := map[string]string{"namespace": r.ns, "workload": "app-000"}

	checked, empty := 0, 0
	for _, set := range []map[string]string{all, one} {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				q := substitute(t, tg.Expr, set)
				series := query(t, r.prom, q)
				if why, ok := onlyNoData(tg.Expr); ok {
					t.Logf("panel %q %s parses; no series here (%s)", p.Title, tg.RefID, why)
					empty++
					continue
				}
				checked++
				assert.NotEmpty(t, series, "panel %q target %s returned no series (variables %v): %s", p.Title, tg.RefID, set, q)
				if set["workload"] != ".*" {
					for _, s := range series {
						if w, ok := s.Metric["workload"]; ok {
							assert.Equal(t, set["workload"], w, "panel %q: %s", p.Title, q)
						}
						if pod, ok := s.Metric["pod"]; ok {
							assert.True(t, strings.HasPrefix(pod, set["workload"]+"-"), "panel %q: pod %s of another workload: %s", p.Title, pod, q)
						}
					}
				}
			}
		}
	}
	t.Logf("%d panel queries returned series, %d parsed without data (noData)", checked, empty)

	// Every alert evaluates now; none of them fires while all is well.
	for _, g := range rules.Spec.Groups {
		for _, rule := range g.Rules {
			assert.Empty(t, query(t, r.prom, rule.Expr.String()), "%s fires while all is well", rule.Alert)
		}
	}
	expr := func(alert string) string {
		for _, g := range rules.Spec.Groups {
			for _, rule := range g.Rules {
				if rule.Alert == alert {
					return rule.Expr.String()
				}
			}
		}
		t.Fatalf("no alert %s", alert)
		return ""
	}
	// A workload marked Degraded under its policy: the leader holds it
	// and counts it in its namespace.
	cp := controlplane.Get(t)
	p := kubetest.NamespacedPolicy(r.ns, false)
	require.NoError(t, cp.Client.Create(t.Context(), p))
	rsr := kubetest.Recommendation(r.ns, "web", "web", v1alpha1.StrategyInPlace, "500m", "128Mi")
	require.NoError(t, cp.Client.Create(t.Context(), rsr))
	since := metav1.Now()
	rsr.Status = v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseDegraded, Reason: v1alpha1.ReasonDegraded,
		Degraded: &v1alpha1.DegradedState{Since: &since, RolledBack: 3, Of: 5, PolicyFingerprint: policy.Fingerprint(p.Spec)}}
	require.NoError(t, cp.Client.Status().Update(t.Context(), rsr))
	s := waitSeries(t, r.prom, expr("KerfWorkloadDegraded"), time.Minute)
	require.Len(t, s, 1)
	assert.Equal(t, r.ns, s[0].Metric["namespace"], "KerfWorkloadDegraded names the namespace")
	assert.Equal(t, "1", s[0].Value[1], "one Degraded workload")
	// The same recommendation gives its namespace the savings metrics:
	// every savings panel's query now returns a series.
	savingsQueries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if why, ok := onlyNoData(tg.Expr); !ok || !strings.Contains(why, savingsNoData) {
				continue
			}
			savingsQueries++
			q := substitute(t, tg.Expr, map[string]string{"namespace": r.ns, "workload": ".*"})
			assert.NotEmpty(t, waitSeries(t, r.prom, q, time.Minute), "panel %q target %s: %s", p.Title, tg.RefID, q)
		}
	}
	assert.Equal(t, 8, savingsQueries, "the savings row's queries")
	s = waitSeries(t, r.prom, `kerf_savings_workloads{namespace="`+r.ns+`"}`, time.Minute)
	assert.Equal(t, "1", s[0].Value[1], "one recommendation in the namespace")

	// The leader goes: the agent's stream is down, and the agents that
	// are up outnumber those the (absent) leader streams from.
	r.stopLeader()
	s = waitSeries(t, r.prom, expr("KerfAgentStreamDisconnected"), time.Minute)
	require.Len(t, s, 1)
	assert.Equal(t, r.node, s[0].Metric["node"], "KerfAgentStreamDisconnected names the node")
	assert.Equal(t, r.agentPod, s[0].Metric["pod"], "KerfAgentStreamDisconnected names the agent's pod")
	s = waitSeries(t, r.prom, expr("KerfLeaderMissingAgents"), time.Minute)
	assert.Equal(t, "1", s[0].Value[1], "one agent up without a stream")
	// The agent goes.
	require.NoError(t, r.agent.Cmd.Process.Signal(os.Interrupt))
	s = waitSeries(t, r.prom, expr("KerfAgentDown"), time.Minute)
	require.Len(t, s, 1)
	assert.Equal(t, r.node, s[0].Metric["node"], "KerfAgentDown names the node")
	assert.Equal(t, r.agentPod, s[0].Metric["pod"], "KerfAgentDown names the agent's pod")
}
