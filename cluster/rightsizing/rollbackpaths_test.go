package rightsizing_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/promql"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/promtest"
)

// TestRollbackWhileAFreezeWindowIsOpen opens a freeze window on the
// policy while a change is watched: the OOM kill still rolls back (a freeze
// holds applies back, never a rollback), and the window is open then, as a
// new apply blocked by it shows.
func TestRollbackWhileAFreezeWindowIsOpen(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.PolicyWith(ns, time.Hour, nil)
	dep, _ := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

	// Open every minute for an hour: open now, whatever the time.
	kubetest.Update(t, c, p, func() {
		p.Spec.Guardrails.FreezeWindows = []v1alpha1.FreezeWindow{{Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "UTC"}}
	})
	time.Sleep(300 * time.Millisecond) // the policy reaches the leader's cache

	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "memory restored inside the freeze window")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)

	// The window was open: other values are held back by it.
	kubetest.Update(t, c, rsr, func() {
		rsr.Spec.Containers[0].Requests.Memory = kubetest.Q("200Mi")
		rsr.Spec.Containers[0].Limits.Memory = kubetest.Q("200Mi")
	})
	rsr = kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonFreezeWindow)
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the freeze held the apply back")
}

// hpaFor is an autoscaling/v2 HPA of Deployment target with a cpu
// Utilization target of percent.
func hpaFor(ns, target string, percent int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: target},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name:   corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(percent)},
			}}},
		},
	}
}

// hpaTarget reads the HPA's cpu utilization target.
func hpaTarget(t *testing.T, c client.Client, hpa *autoscalingv2.HorizontalPodAutoscaler) int32 {
	t.Helper()
	var got autoscalingv2.HorizontalPodAutoscaler
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(hpa), &got))
	return *got.Spec.Metrics[0].Resource.Target.AverageUtilization
}

// TestRollbackRestoresTheHPATarget coordinates an HPA (spec.hpa): halving
// the cpu request doubles its utilization target, and the rollback of cpu
// puts the target back with the request.
func TestRollbackRestoresTheHPATarget(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.Restarts = ptr.To[int32](1) }))
	hpa := hpaFor(ns, "web", 60)
	require.NoError(t, c.Create(ctx, hpa))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rec := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")
	rec.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true}
	require.NoError(t, c.Create(ctx, rec))
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	require.NotNil(t, rsr.Status.Change.HPA, "the HPA was coordinated")
	assert.Equal(t, v1alpha1.HPAChange{Name: "web", PreviousTargetCPUUtilization: 60, AppliedTargetCPUUtilization: 120}, *rsr.Status.Change.HPA)
	assert.Equal(t, int32(120), hpaTarget(t, c, hpa), "60% of 500m is 120% of 250m")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

	kubetest.OOMKilled(t, c, pod, "Error") // a restart: every touched resource, cpu here
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	rsr = kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "cpu restored")
	assert.Equal(t, int32(60), hpaTarget(t, c, hpa), "the HPA target restored with the cpu request")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
}

// TestPromQLThrottlingRollsBackCPU decides a rollback from a real
// Prometheus (health.metricsURL) rather than the agents' stream: it
// scrapes cadvisor's CFS counters of the new pod, 400 periods of which
// 200 throttled, and the leader's PromQL source reads them. The change was
// applied three minutes ago by the leader's clock (so the throttling
// window, from T0+2m, has begun and the counters' series are born in it).
func TestPromQLThrottlingRollsBackCPU(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	var offset atomic.Int64
	offset.Store(int64(-3 * time.Minute))
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }

	target := promtest.NewCadvisorTarget(t, ns, "web-new-1", "app")
	target.Periods.Store(400)
	target.Throttled.Store(200)
	promURL := promtest.Start(t, target.Addr, 200*time.Millisecond)
	src, err := promql.New(promql.Config{URL: promURL}, nil)
	require.NoError(t, err)

	dep, l := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Now: now, Throttling: src}, "250m", "256Mi")
	offset.Store(0)
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	t0 := kubetest.GetRSR(t, c, ns, "web").Status.Change.AppliedAt.Time
	require.Eventually(t, func() bool {
		w, err := src.ThrottleWindows([]*corev1.Pod{pod}, []string{"app"}, t0.Add(2*time.Minute), time.Now())
		return err == nil && w["app"].Periods == 400
	}, 30*time.Second, 100*time.Millisecond, "Prometheus never had the counters")
	assert.Equal(t, v1alpha1.PhaseWatching, kubetest.GetRSR(t, c, ns, "web").Status.Phase, "nothing but the PromQL source says throttled")

	// A pod update makes the leader look now rather than at its next
	// periodic look.
	kubetest.Update(t, c, pod, func() { metav1.SetMetaDataAnnotation(&pod.ObjectMeta, "test/poke", "1") })
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchThrottling)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, rsr.Status.Breach.Resources)
	assert.Contains(t, rsr.Status.Breach.Figures[0], "throttlingRatio 0.5")
	assert.Equal(t, "500m", kubetest.TemplateResources(t, c, dep).Requests.Cpu().String(), "cpu restored")
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Throttling", "cpu"), 1)
}
