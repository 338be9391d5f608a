package rightsizing_test

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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
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
func fortyFailingPods(t *testing.T) (c client.Client, ns string, l *leadertest.Replica) {
	t.Helper()
	c = controlplane.Get(t).Client
	ns = kubetest.Namespace(t, c)
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
	// The breach waits for all 40: restarts and OOM kills of 40. The
	// change makes the new pods Guaranteed, which the policy allows.
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Restarts, g.OOMKills = ptr.To[int32](40), ptr.To[int32](40)
	})
	p.Spec.Guardrails.AllowQoSChange = true
	require.NoError(t, c.Create(ctx, p))
	l = leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:  v1alpha1.StrategyDeferred,
			Containers: []v1alpha1.ContainerResources{{Name: longContainer,
				Requests: &v1alpha1.ResourceValues{CPU: kubetest.Q("20m"), Memory: kubetest.Q("32Mi")},
				Limits:   &v1alpha1.ResourceValues{CPU: kubetest.Q("20m"), Memory: kubetest.Q("32Mi")}}},
		},
	}
	require.NoError(t, c.Create(ctx, rsr))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")

	// The pods start after the change with its values, and all are
	// OOM-killed in a later second than T0.
	nodeName := kubetest.Node(t, c)
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
			r := kubetest.GetRSR(t, c, ns, "web")
			t.Logf("recommendation: %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
	})
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
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
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
	assert.Zero(t, testutil.ToFloat64(l.Metrics.InvalidStatus.WithLabelValues(rightsizing.InvalidFallback)), "no write was refused")
	evs := kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRolledBack, 2)
	for _, e := range evs {
		assert.LessOrEqual(t, len(e.Note), rightsizing.MaxEventNote)
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
	t.Cleanup(rightsizing.LoosenActionMessageLimit(1 << 20)) // after the leader stops
	c, ns, l := fortyFailingPods(t)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseRolledBack, rsr.Status.Phase)
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.True(t, strings.HasPrefix(rb[0].Message, "message left out: the apiserver refused the status write: "), rb[0].Message)
	assert.Contains(t, rb[0].Message, "status.history")
	assert.LessOrEqual(t, len(rb[0].Message), 512)
	// Counted just after the write the test saw: wait for it.
	kubetest.Counts(t, l.Metrics.InvalidStatus.WithLabelValues(rightsizing.InvalidFallback), 1)
	assert.Zero(t, testutil.ToFloat64(l.Metrics.InvalidStatus.WithLabelValues(rightsizing.InvalidRefused)))
	kubetest.Counts(t, l.Metrics.Actions.WithLabelValues("rolled_back", "Restarts", "memory"), 1)
}
