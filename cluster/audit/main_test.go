package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// t0 is the fixture's first action; now is the handler's clock.
var (
	t0  = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(2 * time.Hour)
)

// env is the fixture written to the package's control plane.
var env struct {
	cache    cache.Cache
	nsA, nsB string
}

// stopCache stops the fixture's informer cache.
var stopCache = func() {}

// TestMain shares one real apiserver among the package's tests
// (controlplane.Get); on first use it writes the fixture recommendations
// through the status subresource and starts an informer cache on them, as
// the leader reads them.
func TestMain(m *testing.M) {
	controlplane.Main(m, controlplane.Hooks{Setup: setUp, Teardown: func() { stopCache() }})
}

func setUp(cp *controlplane.ControlPlane) error {
	ctx, cancel := context.WithCancel(context.Background())
	stopCache = cancel
	c := cp.Client
	var err error
	if env.nsA, err = createNamespace(ctx, c, "kerf-audit-a-"); err != nil {
		return err
	}
	if env.nsB, err = createNamespace(ctx, c, "kerf-audit-b-"); err != nil {
		return err
	}
	for _, f := range fixture() {
		if err := createRecommendation(ctx, c, f); err != nil {
			return err
		}
	}
	if env.cache, err = cache.New(cp.Config, cache.Options{Scheme: kube.Scheme}); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	go func() { _ = env.cache.Start(ctx) }()
	if !env.cache.WaitForCacheSync(ctx) {
		return errors.New("cache did not sync")
	}
	return nil
}

func createNamespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	return ns.Name, nil
}

// createRecommendation creates rsr and writes its status through the status
// subresource, as the leader does.
func createRecommendation(ctx context.Context, c client.Client, rsr *v1alpha1.RightsizingRecommendation) error {
	status := rsr.Status
	if err := c.Create(ctx, rsr); err != nil {
		return fmt.Errorf("create %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	rsr.Status = status
	if err := c.Status().Update(ctx, rsr); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", rsr.Namespace, rsr.Name, err)
	}
	return nil
}

func at(minutes int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(minutes) * time.Minute)) }

func recommendation(ns, name string, kind v1alpha1.WorkloadKind, workload string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{Kind: kind, Name: workload},
			Strategy:  v1alpha1.StrategyInPlace,
			Containers: []v1alpha1.ContainerResources{{
				Name:     "app",
				Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("250m"))},
			}},
		},
	}
}

func healthWatch(reason, msg string, when metav1.Time) []metav1.Condition {
	status := metav1.ConditionTrue
	if reason == v1alpha1.HealthWatchWatching {
		status = metav1.ConditionUnknown
	}
	return []metav1.Condition{{Type: v1alpha1.ConditionHealthWatch, Status: status, Reason: reason, Message: msg, LastTransitionTime: when}}
}

// fixture is two namespaces of recommendations. Every action's message
// names it ("web 3" is web's history[3]) so tests compare messages. Actions
// at +30m tie across recommendations and namespaces, and web's history[2]
// and [3] tie within one recommendation.
func fixture() []*v1alpha1.RightsizingRecommendation {
	mem := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

	web := recommendation(env.nsA, "web", v1alpha1.KindDeployment, "web")
	web.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase:      v1alpha1.PhaseWatching,
		Reason:     "Applied",
		Message:    "watching the change applied at 13:00",
		Conditions: healthWatch(v1alpha1.HealthWatchWatching, "watching for 30m", at(60)),
		Change:     &v1alpha1.Change{AppliedAt: at(60), Strategy: v1alpha1.StrategyRollout, Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU}},
		History: []v1alpha1.Action{
			{Time: at(0), Type: v1alpha1.ActionApplied, Reason: "InPlace", Message: "web 0",
				Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory},
				Containers: []v1alpha1.ContainerValueChange{{
					Name: "app",
					Old:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: mem("500m"), Memory: mem("512Mi")}},
					New:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: mem("250m"), Memory: mem("256Mi")}},
				}}},
			{Time: at(10), Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Message: "web 1",
				Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Figures: []string{"oomKills 2 ≥ 1"}},
			{Time: at(30), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonCooldown, Message: "web 2"},
			{Time: at(30), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonSameValues, Message: "web 3"},
			{Time: at(60), Type: v1alpha1.ActionApplied, Reason: "Rollout", Message: "web 4", Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU}},
		},
	}

	webMemory := recommendation(env.nsA, "web-memory", v1alpha1.KindDeployment, "web")
	webMemory.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase:      v1alpha1.PhaseHealthy,
		Conditions: healthWatch(v1alpha1.HealthWatchHealthy, "no breach in 1h", at(90)),
		History: []v1alpha1.Action{
			{Time: at(30), Type: v1alpha1.ActionFailed, Reason: "Infeasible", Message: "web-memory 0"},
			{Time: at(90), Type: v1alpha1.ActionHealthy, Reason: v1alpha1.HealthWatchHealthy, Message: "web-memory 1"},
		},
	}

	db := recommendation(env.nsA, "db", v1alpha1.KindStatefulSet, "db")
	db.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase:      v1alpha1.PhaseHealthy,
		Conditions: healthWatch(v1alpha1.HealthWatchHealthy, "no breach in 20m", at(40)),
		Change:     &v1alpha1.Change{AppliedAt: at(20), Strategy: v1alpha1.StrategyDeferred, Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}},
		History: []v1alpha1.Action{
			{Time: at(20), Type: v1alpha1.ActionApplied, Reason: "Deferred", Message: "db 0"},
			{Time: at(40), Type: v1alpha1.ActionHealthy, Reason: v1alpha1.HealthWatchHealthy, Message: "db 1"},
		},
	}

	api := recommendation(env.nsB, "api", v1alpha1.KindDeployment, "api")
	api.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase:   v1alpha1.PhaseBlocked,
		Reason:  v1alpha1.ReasonFreezeWindow,
		Message: "freeze window until 14:00",
		History: []v1alpha1.Action{
			{Time: at(30), Type: v1alpha1.ActionApplied, Reason: "InPlace", Message: "api 0"},
			{Time: at(50), Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchRestarts, Message: "api 1"},
			{Time: at(100), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonFreezeWindow, Message: "api 2"},
		},
	}

	// agent has no status yet: Kerf has not acted on it.
	agent := recommendation(env.nsB, "agent", v1alpha1.KindDaemonSet, "agent")

	return []*v1alpha1.RightsizingRecommendation{web, webMemory, db, api, agent}
}

// allNewestFirst is every fixture action in the API's order.
var allNewestFirst = []string{
	"api 2",        // +100m
	"web-memory 1", // +90m
	"web 4",        // +60m
	"api 1",        // +50m
	"db 1",         // +40m
	"web 3",        // +30m, namespace A, web, recorded after web 2
	"web 2",        // +30m
	"web-memory 0", // +30m, namespace A, web-memory
	"api 0",        // +30m, namespace B
	"db 0",         // +20m
	"web 1",        // +10m
	"web 0",        // +0m
}
