package recommender_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// recommendedWebUnder is recommendedWebLeader with the recommending
// policy's spec.recommend changed by set first.
func recommendedWebUnder(t *testing.T, set func(*v1alpha1.RecommendSpec), before func(*signals.Stores, *corev1.Pod)) (client.Client, string, *leadertest.Replica) {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	set(p.Spec.Recommend)
	return leadertest.RecommendedWebUnder(t, c, ns, p, before)
}

// refusalsOf returns the basis's refusals of the container with reason.
func refusalsOf(basis v1alpha1.RecommendationBasis, reason recommend.Reason) []v1alpha1.RefusalBasis {
	var out []v1alpha1.RefusalBasis
	for _, c := range basis.Containers {
		for _, f := range c.Refusals {
			if recommend.Reason(f.Reason) == reason {
				out = append(out, f)
			}
		}
	}
	return out
}

// TestRecommenderKeepsRequestsWithinThePolicysBounds checks
// spec.recommend.containers: the entry that names the container wins
// over "*", its minAllowed raises the CPU request the usage (50m) asks
// for and its maxAllowed caps the memory request below the pod minimum.
func TestRecommenderKeepsRequestsWithinThePolicysBounds(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(rs *v1alpha1.RecommendSpec) {
		rs.Containers = []v1alpha1.ContainerRecommendPolicy{
			{Name: "*", MinAllowed: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("300m"))}},
			{Name: "app", MinAllowed: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse("200m"))},
				MaxAllowed: &v1alpha1.ResourceValues{Memory: ptr.To(resource.MustParse("100Mi"))}},
		}
	}, nil)
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Equal(t, int64(200), got.Requests.CPU.MilliValue(), "CPU request %s: app's minAllowed, not the 60m usage asks nor the 300m of \"*\"", got.Requests.CPU)
	assert.Equal(t, int64(100<<20), got.Requests.Memory.Value(), "memory request %s: app's maxAllowed", got.Requests.Memory)
	assert.Less(t, basis.Containers[0].TargetCPUMilli, int64(200), "the estimate before the bound")
	assert.Equal(t, int64(200), got.Limits.CPU.MilliValue(), "the limit keeps the manifest's limit = request")
}

// TestRecommenderRefusesToLowerAnUpscaleOnlyResource checks
// spec.recommend.upscaleOnly: memory stays at the manifest's 256Mi with an
// UpscaleOnly refusal recorded, while CPU, not listed, goes down.
func TestRecommenderRefusesToLowerAnUpscaleOnlyResource(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(rs *v1alpha1.RecommendSpec) {
		rs.UpscaleOnly = []v1alpha1.ResourceName{v1alpha1.ResourceMemory}
	}, nil)
	rsr, basis := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Less(t, got.Requests.CPU.MilliValue(), int64(500), "CPU is not upscale-only: %s", got.Requests.CPU)
	assert.Equal(t, int64(256<<20), got.Requests.Memory.Value(), "memory request %s of an upscale-only memory", got.Requests.Memory)
	assert.Equal(t, int64(256<<20), got.Limits.Memory.Value(), "memory limit %s of an upscale-only memory", got.Limits.Memory)
	up := refusalsOf(basis, recommend.ReasonUpscaleOnly)
	require.NotEmpty(t, up, "the upscale-only refusal is recorded: %+v", basis.Containers[0].Refusals)
	for _, f := range up {
		assert.Equal(t, v1alpha1.ResourceMemory, f.Resource)
		assert.Equal(t, int64(256<<20), f.Held)
		assert.Less(t, f.Asked, int64(256<<20), "what the estimator asked for")
	}
}

// burstableWebUnder is recommendedWebUnder with a Burstable web: requests
// of 500m and 256Mi under limits of 1 core and 512Mi.
func burstableWebUnder(t *testing.T, set func(*v1alpha1.RecommendSpec)) (client.Client, string) {
	t.Helper()
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	set(p.Spec.Recommend)
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	dep.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	require.NoError(t, c.Create(context.Background(), dep))
	require.NoError(t, c.Create(context.Background(), p))
	sig := signals.New()
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	now := time.Now()
	for i := range 4 {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: now.Add(time.Duration(i-3) * time.Second),
			CPU: time.Duration(i) * 50 * time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20})
	}
	leadertest.StartReplica(t, ns, "a", cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond}})
	return c, ns
}

// TestRecommenderKeepsTheLimitsOfABurstablePodByDefault checks the
// default limits rule (keepLimitProportion false): the requests go down,
// the manifest's limits (1, 512Mi) stay as they are.
func TestRecommenderKeepsTheLimitsOfABurstablePodByDefault(t *testing.T) {
	c, ns := burstableWebUnder(t, func(*v1alpha1.RecommendSpec) {})
	rsr, _ := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	assert.Less(t, got.Requests.CPU.MilliValue(), int64(500), "CPU request %s", got.Requests.CPU)
	assert.Less(t, got.Requests.Memory.Value(), int64(256<<20), "memory request %s", got.Requests.Memory)
	assert.Equal(t, int64(1000), got.Limits.CPU.MilliValue(), "CPU limit %s as in the manifest", got.Limits.CPU)
	assert.Equal(t, int64(512<<20), got.Limits.Memory.Value(), "memory limit %s as in the manifest", got.Limits.Memory)
}

// TestRecommenderScalesLimitsWithKeepLimitProportion checks
// spec.recommend.keepLimitProportion true on a Burstable pod: each limit
// keeps the manifest's limit/request ratio, 2.
func TestRecommenderScalesLimitsWithKeepLimitProportion(t *testing.T) {
	c, ns := burstableWebUnder(t, func(rs *v1alpha1.RecommendSpec) { rs.KeepLimitProportion = ptr.To(true) })
	rsr, _ := kubetest.WaitRecommended(t, c, ns)
	got := rsr.Spec.Containers[0]
	require.Less(t, got.Requests.CPU.MilliValue(), int64(500), "CPU request %s", got.Requests.CPU)
	assert.Equal(t, 2*got.Requests.CPU.MilliValue(), got.Limits.CPU.MilliValue(), "CPU limit %s", got.Limits.CPU)
	assert.Equal(t, 2*got.Requests.Memory.Value(), got.Limits.Memory.Value(), "memory limit %s", got.Limits.Memory)
}

// TestRecommenderRecordsARefusalOnceAsAnActionAndAnEvent checks that the
// values an OOM kill holds back are recorded, with their figures, as one
// refused action in status.history and one Normal Refused Event on the
// recommendation (kubectl describe), and not again on later passes that
// find the same refusals.
func TestRecommenderRecordsARefusalOnceAsAnActionAndAnEvent(t *testing.T) {
	c, ns, _ := recommendedWebUnder(t, func(*v1alpha1.RecommendSpec) {}, func(sig *signals.Stores, pod *corev1.Pod) {
		sig.Kernel.AddOOMKill(pod.UID, "app", time.Now().Add(-time.Minute))
	})
	kubetest.WaitRecommended(t, c, ns)
	var refused []v1alpha1.Action
	require.Eventually(t, func() bool {
		refused = kubetest.HistoryOf(kubetest.GetRSR(t, c, ns, "web"), v1alpha1.ActionRefused)
		return len(refused) > 0
	}, 15*time.Second, 50*time.Millisecond, "no refused action recorded")
	a := refused[0]
	assert.Equal(t, string(recommend.ReasonOOMKill), a.Reason)
	assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, a.Resources)
	assert.Contains(t, a.Message, "memory request of app (OOMKill)")
	require.NotEmpty(t, a.Figures)
	assert.Contains(t, a.Figures[0], "app: memory request held at")
	var req *v1alpha1.Refusal
	for i, f := range a.Refusals {
		if f.Field == "request" {
			req = &a.Refusals[i]
		}
	}
	require.NotNil(t, req, "the memory request's refusal: %+v", a.Refusals)
	assert.Equal(t, "app", req.Container)
	assert.Equal(t, v1alpha1.ResourceMemory, req.Resource)
	assert.Less(t, req.Asked, int64(256<<20), "what the estimator asked for")
	assert.GreaterOrEqual(t, req.Held, int64(356<<20), "at least max(peak + 100Mi, peak × 1.2)")
	assert.Equal(t, "268435456", req.Observed, "the peak at the kill: the 256Mi limit")
	assert.Equal(t, strconv.FormatInt(req.Held, 10), req.Threshold, "the OOM floor")
	assert.NotNil(t, req.At, "when the kill happened")
	// The audit API and the hub forwarder build their entry with EntryOf.
	entry := auditv1.EntryOf(kubetest.GetRSR(t, c, ns, "web"), &a)
	assert.Equal(t, v1alpha1.ActionRefused, entry.Type)
	assert.Equal(t, a.Refusals, entry.Refusals, "the figures reach the audit API and the hub")

	// More passes: the recommender's (five a second, a recommendation a
	// second) and the reconciler's, woken by changes to the recommendation.
	for i := range 3 {
		rsr := kubetest.GetRSR(t, c, ns, "web")
		patch := client.MergeFrom(rsr.DeepCopy())
		rsr.Labels["test/pass"] = strconv.Itoa(i)
		require.NoError(t, c.Patch(context.Background(), rsr, patch))
		time.Sleep(time.Second)
	}
	got := kubetest.GetRSR(t, c, ns, "web")
	assert.Len(t, kubetest.HistoryOf(got, v1alpha1.ActionRefused), 1, "one refused action for one set of refusals: %+v", got.Status.History)
	assert.NotEmpty(t, got.Status.RecordedRefusals)
	var evs []eventsv1.Event
	for _, e := range kubetest.EventsFor(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventRefused) {
		if e.Regarding.Kind == "RightsizingRecommendation" {
			evs = append(evs, e)
		}
	}
	require.Len(t, evs, 1, "one Refused Event on the recommendation")
	assert.Nil(t, evs[0].Series, "emitted once, not repeated")
	assert.Contains(t, evs[0].Note, "memory request held at")
	t.Log(evs[0].Note)
}
