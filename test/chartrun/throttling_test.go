// Package chartrun installs charts/kerf with Helm's library on a real
// kube-apiserver and runs the installed leader Deployment's pod template
// as the real kerf-leader binary: the chart's values, RBAC and admission
// policies as a cluster would run them, without the sandbox. No kubelet
// runs here, so the test does the kubelet's part (pod_test.go).
package chartrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/promql"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/promtest"
)

// releaseNamespace holds the release's records; the chart's objects go
// to kerf-system, which the chart creates.
const releaseNamespace = "default"

// kerfNS is the namespace the chart installs Kerf in.
const kerfNS = "kerf-system"

// The counters the cadvisor target serves once the window is open: a
// ratio of 0.325 over 480 periods, figures no other source gives.
const (
	servedPeriods   = 480
	servedThrottled = 156
)

// unreachable is a Prometheus URL nothing answers at.
const unreachable = "http://127.0.0.1:1"

// TestChartLeaderReadsThrottlingFromPrometheus installs the chart with
// leader.cadvisorFallback=false and leader.metricsURL at a port nothing
// listens on, upgrades it without leader.metricsURL, then with it at a
// real Prometheus. Each time the leader is the installed Deployment's pod
// template run as the real kerf-leader binary (runPod: no kubelet runs
// here).
//
// Prometheus scrapes cadvisor's CFS counters of the watched workload's
// new pod: 156 of 480 periods throttled, above the default policy's
// throttlingRatio 0.25. The throttling window opens at T0+2m
// (healthwatch.ThrottlingDelay, fixed) and the binary's clock is the
// real one. So the test moves status.change.appliedAt 3 minutes back,
// as a change an earlier replica applied would read, rather than wait.
//
// With Prometheus unreachable the leader says it cannot read the window,
// and without metricsURL that it has no throttling source; both times it
// keeps watching. With Prometheus it rolls cpu back for throttling, its
// figures the ones Prometheus served. A chart that drops either value
// fails.
func TestChartLeaderReadsThrottlingFromPrometheus(t *testing.T) {
	promtest.NeedBinary(t)
	cp := controlplane.StartForTest(t, func(o *controlplane.Options) { o.CRDDirs = []string{} })
	ctx := context.Background()
	bin := buildLeader(t, t.TempDir())

	ns := kubetest.Namespace(t, cp.Client)
	target := promtest.NewCadvisorTarget(t, ns, "web-new-1", "app")
	promURL := promtest.Start(t, target.Addr, 500*time.Millisecond)

	repo, err := kube.RepoRoot()
	require.NoError(t, err)
	chrt, err := loader.Load(filepath.Join(repo, "charts", "kerf"))
	require.NoError(t, err, "load charts/kerf")
	cfg := helmConfig(t, cp)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.Timeout = "kerf", releaseNamespace, 2*time.Minute
	_, err = inst.Run(chrt, map[string]any{"leader": map[string]any{"cadvisorFallback": false, "metricsURL": unreachable}})
	require.NoError(t, err, "helm install")
	// A client made now, so that its REST mapper knows the CRDs Helm made.
	c, err := client.New(cp.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	publishRootCA(t, cp)

	first := runPod(t, cp, leaderDeployment(t, c), bin)
	waitLeading(t, c, first)
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	pod := kubetest.AdoptedPod(t, c, web, "web-new-1")

	t0 := backdate(t, c, ns, "web", 3*time.Minute)
	target.Periods.Store(servedPeriods)
	target.Throttled.Store(servedThrottled)
	src, err := promql.New(promql.Config{URL: promURL}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		w, err := src.ThrottleWindows([]*corev1.Pod{pod}, []string{"app"}, t0.Add(healthwatch.ThrottlingDelay), time.Now())
		return err == nil && w["app"].Periods == servedPeriods
	}, 30*time.Second, 200*time.Millisecond, "Prometheus never had the counters in the window")

	// Prometheus unreachable: the throttling rule is not evaluated, never
	// a breach, and the fallback is not taken. Each condition below is
	// written after the window opened, with the pod adopted.
	poke(t, c, pod, "1")
	watching(t, c, ns, "read the throttling window: ", unreachable)
	first.alive(t)

	// Without leader.metricsURL, and the fallback off, nothing reads them.
	second := upgrade(t, cp, c, cfg, chrt, bin, first, map[string]any{"cadvisorFallback": false, "metricsURL": ""})
	poke(t, c, pod, "2")
	watching(t, c, ns, "no throttling source is configured")

	third := upgrade(t, cp, c, cfg, chrt, bin, second, map[string]any{"cadvisorFallback": false, "metricsURL": promURL})
	poke(t, c, pod, "3")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	figure := fmt.Sprintf("throttlingRatio 0.32 ≥ 0.25 (container app, %d periods)", servedPeriods)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceCPU}, rsr.Status.Breach.Resources)
	assert.Contains(t, strings.Join(rsr.Status.Breach.Figures, "; "), figure, "the breach's figures are Prometheus'")
	rolledBack := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rolledBack, 1)
	assert.Contains(t, rolledBack[0].Figures, figure, "the history's figures are Prometheus'")
	t.Logf("with Prometheus: %s", rsr.Status.Message)
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, web).Requests.Cpu().String(), "cpu restored")
	third.alive(t)
}

// watching waits until the HealthWatch condition says the throttling
// rule is not evaluated yet, with every one of says, for the adopted pod,
// and checks that the recommendation is still watched.
func watching(t *testing.T, c client.Client, ns string, says ...string) {
	t.Helper()
	rsr := kubetest.WaitRSR(t, c, ns, "web", func(rsr *v1alpha1.RightsizingRecommendation) bool {
		cond := kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch)
		if cond == nil || !strings.Contains(cond.Message, "not evaluated yet: throttling: "+says[0]) || !strings.Contains(cond.Message, "1 of 1 pods adopted") {
			return false
		}
		for _, s := range says[1:] {
			if !strings.Contains(cond.Message, s) {
				return false
			}
		}
		return true
	}, "the HealthWatch condition never said: throttling %q", says)
	assert.Equal(t, v1alpha1.PhaseWatching, rsr.Status.Phase)
	t.Logf("watching: %s", kubetest.Condition(rsr, v1alpha1.ConditionHealthWatch).Message)
}

// upgrade runs helm upgrade with the leader values, and rolls the leader
// out as its Deployment would: a pod of the new template stands by, the
// old one stops and hands the Lease over, and the new one leads.
func upgrade(t *testing.T, cp *controlplane.ControlPlane, c client.Client, cfg *action.Configuration, chrt *chart.Chart, bin string, old *podProcess, leader map[string]any) *podProcess {
	t.Helper()
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = releaseNamespace, 2*time.Minute
	_, err := up.Run("kerf", chrt, map[string]any{"leader": leader})
	require.NoError(t, err, "helm upgrade with %v", leader)
	next := runPod(t, cp, leaderDeployment(t, c), bin)
	old.stop(t)
	require.NoError(t, client.IgnoreNotFound(c.Delete(context.Background(), old.pod)))
	waitLeading(t, c, next)
	return next
}

// helmConfig is what `helm --kubeconfig K --namespace default` works with.
func helmConfig(t *testing.T, cp *controlplane.ControlPlane) *action.Configuration {
	t.Helper()
	settings := cli.New()
	settings.KubeConfig = cp.Kubeconfig
	settings.SetNamespace(releaseNamespace)
	cfg := new(action.Configuration)
	require.NoError(t, cfg.Init(settings.RESTClientGetter(), releaseNamespace, "secret", t.Logf))
	return cfg
}

// publishRootCA writes ConfigMap kube-root-ca.crt into kerf-system, as
// kube-controller-manager publishes the cluster's CA in every namespace
// (none runs here). Its ca.crt is the CA of the apiserver's webhook
// client certificate, which the leader's --webhook-client-ca trusts.
func publishRootCA(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ca, err := os.ReadFile(cp.WebhookClientCA)
	require.NoError(t, err)
	_, err = cp.Clientset.CoreV1().ConfigMaps(kerfNS).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: kerfNS, Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(ca)},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "publish kube-root-ca.crt")
}

// leaderDeployment reads the installed kerf-leader Deployment.
func leaderDeployment(t *testing.T, c client.Client) *appsv1.Deployment {
	t.Helper()
	var dep appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: kerfNS, Name: "kerf-leader"}, &dep))
	return &dep
}

// waitLeading waits until p's pod holds the Lease kerf-leader.
func waitLeading(t *testing.T, c client.Client, p *podProcess) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.alive(t)
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: kerfNS, Name: "kerf-leader"}, &l); err != nil {
			return false
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == p.pod.Name
	}, 60*time.Second, 100*time.Millisecond, "%s never led", p.pod.Name)
}

// backdate moves the recommendation's status.change.appliedAt back by d
// and returns it.
func backdate(t *testing.T, c client.Client, ns, name string, d time.Duration) time.Time {
	t.Helper()
	var t0 time.Time
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rsr := kubetest.GetRSR(t, c, ns, name)
		require.NotNil(t, rsr.Status.Change)
		t0 = rsr.Status.Change.AppliedAt.Add(-d)
		rsr.Status.Change.AppliedAt = metav1.NewTime(t0)
		return c.Status().Update(context.Background(), rsr)
	}))
	return t0
}

// poke updates an annotation of pod: a pod update makes the leader look
// at its workload's watch now, rather than at its next periodic look.
func poke(t *testing.T, c client.Client, pod *corev1.Pod, value string) {
	t.Helper()
	kubetest.Update(t, c, pod, func() { metav1.SetMetaDataAnnotation(&pod.ObjectMeta, "test/poke", value) })
}
