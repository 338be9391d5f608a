package cluster

// Status writes within the CRD's limits (docs/security.md): what the leader
// writes from what it cannot bound (many pods' failures, touched pods,
// baselines, figures) is cut to fit, so that the apiserver does not refuse
// the write (422) and the change is not left unwatched.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// longContainer is a container name as long as Kubernetes allows (63).
var longContainer = "app-" + strings.Repeat("c", 59)

// fortyFailingPods runs a Deferred change of a Deployment whose container
// has a 63-character name, under leader "a" and a policy whose restarts
// and oomKills thresholds are 40, and gives 40 pods of its ReplicaSet the
// values (requests equal to limits: Guaranteed, as the webhook would),
// each OOM-killed and restarted with a long termination message. The
// Restarts rollback puts the requests back, which would make every pod
// Burstable; Kubernetes keeps a pod's QoS class, so the apiserver refuses
// all 40 resizes and the rollback's message names 40 pods with the
// apiserver's message each: far over the 4096 bytes of a history entry.
func fortyFailingPods(t *testing.T) (c client.Client, ns string, l *testLeader) {
	t.Helper()
	c = controlplane.Get(t).Client
	ns = namespace(t, c)
	ctx := context.Background()
	labels := map[string]string{"app": "web", "pod-template-hash": "h1"}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
	}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: longContainer, Image: "kerf.local/kerf-workload:dev", Resources: res}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](40), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
	require.NoError(t, c.Create(ctx, dep))
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-h1", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](40), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
	}
	require.NoError(t, c.Create(ctx, rs))
	// The breach waits for all 40: restarts and OOM kills of 40.
	require.NoError(t, c.Create(ctx, policyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Restarts, g.OOMKills = ptr.To[int32](40), ptr.To[int32](40)
	})))
	l = startLeader(t, ns, "a", Config{})
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:  v1alpha1.StrategyDeferred,
			Containers: []v1alpha1.ContainerResources{{Name: longContainer,
				Requests: &v1alpha1.ResourceValues{CPU: q("20m"), Memory: q("32Mi")},
				Limits:   &v1alpha1.ResourceValues{CPU: q("20m"), Memory: q("32Mi")}}},
		},
	}
	require.NoError(t, c.Create(ctx, rsr))
	waitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	// The pods start after the change with its values, and all are
	// OOM-killed in a later second than T0.
	nodeName := node(t, c)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	for i := range 40 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-h1-%s-%02d", strings.Repeat("p", 50), i), Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = nodeName
		pod.Spec.Containers[0].Resources.Requests = pod.Spec.Containers[0].Resources.Limits.DeepCopy()
		require.NoError(t, c.Create(ctx, pod))
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation,
			ContainerStatuses: []corev1.ContainerStatus{{Name: longContainer, Ready: true, RestartCount: 1,
				Resources: pod.Spec.Containers[0].Resources.DeepCopy(),
				State:     corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Reason: "OOMKilled", Message: strings.Repeat("out of memory: killed process in the cgroup; ", 60),
					StartedAt: metav1.NewTime(time.Now().Add(-time.Second)), FinishedAt: metav1.Now()}}}}}
		require.NoError(t, c.Status().Update(ctx, pod))
		require.Equal(t, corev1.PodQOSGuaranteed, pod.Status.QOSClass)
	}
	return c, ns, l
}

// TestRollbackOfFortyFailingPodsIsRecorded: the rollback of a change whose
// 40 pods all fail, and none of which can be resized back, is recorded:
// its history entry fits in 4096 bytes and counts the pods it leaves out,
// and its Events fit in 1 kB. It failed before: the message joined all 40
// pods' failures (some 10 kB), the apiserver refused the status write with
// 422 on every retry, the breach was never marked restored and no
// RolledBack Event was emitted.
func TestRollbackOfFortyFailingPodsIsRecorded(t *testing.T) {
	c, ns, l := fortyFailingPods(t)
	t.Cleanup(func() {
		if t.Failed() {
			r := getRSR(t, c, ns, "web")
			t.Logf("recommendation: %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
	})
	waitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	rsr := waitRestored(t, c, ns, "web")
	rb := historyOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	msg := rb[0].Message
	assert.LessOrEqual(t, len(msg), v1alpha1.MaxActionMessageLength)
	assert.True(t, utf8.ValidString(msg), "cut on a rune boundary")
	assert.Contains(t, msg, "not resized back, these keep the changed values until they are recreated: pod web-h1-")
	m := regexp.MustCompile(`… \(and (\d+) more pods\)$`).FindStringSubmatch(msg)
	require.NotNil(t, m, "the message counts the pods it leaves out: %s", msg)
	more, _ := strconv.Atoi(m[1])
	shown := strings.Count(msg, ": Rejected: ")
	assert.Positive(t, shown)
	assert.Equal(t, 40, shown+more, "every pod is named or counted")
	assert.Equal(t, []string{"restarts 40 ≥ 40", "oomKills 40 ≥ 40"}, rb[0].Figures)
	counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
	assert.Zero(t, testutil.ToFloat64(l.Metrics.InvalidStatus.WithLabelValues(invalidFallback)), "no write was refused")
	evs := waitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
	for _, e := range evs {
		assert.LessOrEqual(t, len(e.Note), maxEventNote)
	}
}

// TestRefusedStatusWriteFallsBackToAMinimalStatus: a status write the
// apiserver still refuses as invalid (here the action message's cut is
// loosened past the CRD's 4096 bytes, as a limit fitStatus missed would
// be) is logged, counted in kerf_status_writes_invalid_total{outcome=
// "fallback"} and written again without the outcome's messages: the
// rollback is recorded and the breach marked restored rather than the
// write retried forever.
func TestRefusedStatusWriteFallsBackToAMinimalStatus(t *testing.T) {
	saved := statusLimits
	statusLimits.actionMessage = 1 << 20
	t.Cleanup(func() { statusLimits = saved }) // after the leader stops
	c, ns, l := fortyFailingPods(t)
	rsr := waitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	rb := historyOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.True(t, strings.HasPrefix(rb[0].Message, "message left out: the apiserver refused the status write: "), rb[0].Message)
	assert.Contains(t, rb[0].Message, "status.history")
	assert.LessOrEqual(t, len(rb[0].Message), 512)
	// Counted just after the write the test saw: wait for it.
	counts(t, l.Metrics.InvalidStatus.WithLabelValues(invalidFallback), 1)
	assert.Zero(t, testutil.ToFloat64(l.Metrics.InvalidStatus.WithLabelValues(invalidRefused)))
	counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
}

// TestFittedStatusIsAcceptedByTheCRD: a status with every field the
// leader fills from unbounded inputs over the CRD's limit (messages,
// figures, 2001 touched objects, 4100 restart baselines) is refused by the
// apiserver as it stands (the limits are real), and accepted once
// fitStatus cut it: the touched objects keep the Deployment and count the
// 977 pods left out, the messages say how much they lost.
func TestFittedStatusIsAcceptedByTheCRD(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := namespace(t, c)
	ctx := context.Background()
	rsr := recommendation(ns, "web", "web", v1alpha1.StrategyDeferred, "500m", "256Mi")
	require.NoError(t, c.Create(ctx, rsr))

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	long := func(n int) string { return strings.Repeat("é", n/2) } // two bytes a rune
	figures := make([]string, 20)
	for i := range figures {
		figures[i] = fmt.Sprintf("figure %d %s", i, long(300))
	}
	touched := []v1alpha1.TouchedObject{{Kind: "Deployment", Name: "web"}}
	for i := range 2000 {
		touched = append(touched, v1alpha1.TouchedObject{Kind: "Pod", Name: fmt.Sprintf("web-h1-%04d", i), ResourceVersion: "1"})
	}
	baselines := make([]v1alpha1.RestartBaseline, 4100)
	for i := range baselines {
		baselines[i] = v1alpha1.RestartBaseline{Pod: fmt.Sprintf("web-h1-%04d", i), Container: "app"}
	}
	rsr.Status = v1alpha1.RightsizingRecommendationStatus{
		Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchOOMKills, Message: long(40000),
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionHealthWatch, Status: metav1.ConditionFalse,
			Reason: v1alpha1.HealthWatchOOMKills, Message: long(40000), LastTransitionTime: now}},
		Change: &v1alpha1.Change{AppliedAt: now, Strategy: v1alpha1.StrategyDeferred, Touched: touched, RestartBaselines: baselines},
		Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: now, Figures: figures},
		Rollback: &v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Reason: v1alpha1.HealthWatchOOMKills,
			Message: long(5000)},
		History: []v1alpha1.Action{{Seq: 1, Time: now, Type: v1alpha1.ActionRolledBack, Reason: v1alpha1.HealthWatchOOMKills,
			Message: long(10000), Figures: figures}},
	}
	raw := rsr.DeepCopy()
	err := c.Status().Update(ctx, raw)
	require.True(t, apierrors.IsInvalid(err), "the CRD refuses the status as it stands: %v", err)
	// The apiserver checks the strings' lengths in a second pass, once
	// the lists are within theirs.
	for _, field := range []string{"status.history[0].message", "status.history[0].figures",
		"status.change.touched", "status.change.restartBaselines", "status.breach.figures"} {
		assert.Contains(t, err.Error(), field)
	}

	cut := fitStatus(&rsr.Status)
	assert.NotEmpty(t, cut)
	require.NoError(t, c.Status().Update(ctx, rsr), "the fitted status is accepted")
	got := getRSR(t, c, ns, "web")
	ch := got.Status.Change
	require.Len(t, ch.Touched, v1alpha1.MaxTouched)
	assert.Equal(t, "Deployment", ch.Touched[0].Kind, "the workload is kept")
	assert.Equal(t, int32(2001-v1alpha1.MaxTouched), ch.TouchedOmitted)
	assert.Len(t, ch.RestartBaselines, v1alpha1.MaxBaselines)
	h := got.Status.History[0]
	assert.LessOrEqual(t, len(h.Message), v1alpha1.MaxActionMessageLength)
	assert.Regexp(t, `… \(and \d+ more bytes\)$`, h.Message)
	assert.True(t, utf8.ValidString(h.Message))
	require.Len(t, h.Figures, v1alpha1.MaxFigures)
	assert.Equal(t, "… and 5 more figures", h.Figures[v1alpha1.MaxFigures-1])
	assert.LessOrEqual(t, len(h.Figures[0]), v1alpha1.MaxFigureLength)
	assert.Len(t, got.Status.Breach.Figures, v1alpha1.MaxFigures)
	assert.LessOrEqual(t, len(got.Status.Rollback.Message), v1alpha1.MaxRollbackMessageLength)
	assert.LessOrEqual(t, len(got.Status.Message), v1alpha1.MaxStatusMessageLength)
}

// TestCutsSayWhatTheyLeaveOut: fit, cutTo and joinFit stay within their
// bound and cut on a rune boundary; fit and joinFit count what they leave
// out; capTouched keeps the objects that are not pods.
func TestCutsSayWhatTheyLeaveOut(t *testing.T) {
	s := strings.Repeat("日本", 1000) // three bytes a rune
	for _, n := range []int{0, 5, 30, 31, 32, 100, 4096} {
		got := fit(s, n)
		assert.LessOrEqual(t, len(got), max(n, len(moreBytes(len(s)))), "n=%d", n)
		require.True(t, utf8.ValidString(got), "n=%d", n)
		m := regexp.MustCompile(`^(.*)… \(and (\d+) more bytes\)$`).FindStringSubmatch(got)
		require.NotNil(t, m, got)
		left, _ := strconv.Atoi(m[2])
		assert.Equal(t, len(s), len(m[1])+left, "n=%d: the count is what was left out", n)
	}
	assert.Equal(t, "short", fit("short", 5))
	// The refusals' mark, "…" alone, is cut the same way.
	for _, n := range []int{3, 4, 5, 256, 1024} {
		got := cutTo(s, n, ellipsis)
		assert.LessOrEqual(t, len(got), n, "n=%d", n)
		require.True(t, utf8.ValidString(got), "n=%d", n)
		prefix, ok := strings.CutSuffix(got, "…")
		require.True(t, ok, got)
		assert.True(t, strings.HasPrefix(s, prefix), "n=%d", n)
		assert.Greater(t, len(prefix), n-len("…")-utf8.UTFMax, "n=%d: only a partial rune is dropped", n)
	}

	items := make([]string, 40)
	for i := range items {
		items[i] = fmt.Sprintf("pod web-%02d: Rejected: %s", i, strings.Repeat("x", 200))
	}
	got := joinFit(items, "; ", 4096, "pods")
	assert.LessOrEqual(t, len(got), 4096)
	m := regexp.MustCompile(`; … \(and (\d+) more pods\)$`).FindStringSubmatch(got)
	require.NotNil(t, m, got)
	more, _ := strconv.Atoi(m[1])
	assert.Equal(t, 40, strings.Count(got, ": Rejected: ")+more)
	assert.Equal(t, "a; b", joinFit([]string{"a", "b"}, "; ", 10, "pods"))

	touched := []v1alpha1.TouchedObject{{Kind: "Deployment", Name: "web"}}
	for i := range 1500 {
		touched = append(touched, v1alpha1.TouchedObject{Kind: "Pod", Name: strconv.Itoa(i)})
	}
	touched = append(touched, v1alpha1.TouchedObject{Kind: "HorizontalPodAutoscaler", Name: "web"})
	kept, omitted := capTouched(touched)
	require.Len(t, kept, v1alpha1.MaxTouched)
	assert.Equal(t, int32(1502-v1alpha1.MaxTouched), omitted)
	assert.Equal(t, "Deployment", kept[0].Kind)
	assert.Equal(t, "HorizontalPodAutoscaler", kept[v1alpha1.MaxTouched-1].Kind)
	assert.Equal(t, "1021", kept[v1alpha1.MaxTouched-2].Name)
	small, none := capTouched(touched[:10])
	assert.Len(t, small, 10)
	assert.Zero(t, none)
}
