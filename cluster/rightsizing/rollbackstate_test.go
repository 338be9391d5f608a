package rightsizing_test

// Tests of the rollback state on the owner, the restore's values, the
// backoff's retries and the state left when a policy goes away (issue 12,
// items 4 to 6 and its defects), on the real control plane.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/policy"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// ownerState reads the Deployment's kerf.dev/rollback-state annotation;
// nil when there is none.
func ownerState(t *testing.T, c client.Client, dep *appsv1.Deployment) *v1alpha1.RollbackState {
	t.Helper()
	var got appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(dep), &got))
	raw, ok := got.Annotations[v1alpha1.RollbackStateAnnotation]
	if !ok {
		return nil
	}
	var st v1alpha1.RollbackState
	require.NoError(t, json.Unmarshal([]byte(raw), &st))
	return &st
}

// waitOwnerState waits until the owner's annotation satisfies ok, and
// returns it.
func waitOwnerState(t *testing.T, c client.Client, dep *appsv1.Deployment, what string, ok func(*v1alpha1.RollbackState) bool) *v1alpha1.RollbackState {
	t.Helper()
	var st *v1alpha1.RollbackState
	require.Eventually(t, func() bool {
		st = ownerState(t, c, dep)
		return ok(st)
	}, 20*time.Second, 50*time.Millisecond, "the owner's %s never showed %s", v1alpha1.RollbackStateAnnotation, what)
	return st
}

// poker makes the leader look at recommendation ns/web now, as a timer
// would, by touching an annotation (a conflict with the leader's writes is
// retried).
func poker(t *testing.T, c client.Client, ns string) func() {
	var n atomic.Int64
	return func() {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var r v1alpha1.RightsizingRecommendation
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &r); err != nil {
				return err
			}
			if r.Annotations == nil {
				r.Annotations = map[string]string{}
			}
			r.Annotations["test/poke"] = fmt.Sprint(n.Add(1))
			return c.Update(context.Background(), &r)
		}))
	}
}

// waitBackoff waits until status.rollback is in state on turn.
func waitBackoff(t *testing.T, c client.Client, ns string, state v1alpha1.BackoffState, turn int32) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	var rsr *v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		st := rsr.Status.Rollback
		return st != nil && st.State == state && st.Turn == turn
	}, 20*time.Second, 50*time.Millisecond, "never reached %s in turn %d", state, turn)
	return rsr
}

// TestOwnerStateTellsTheWholeStory: while a memory rollback runs and backs
// off, the owner's annotation names the policy and its fingerprint, the
// failure, and the values being restored; once the turn completes those
// values are cleared and the turns stay. RollingBackStarted is a Warning.
func TestOwnerStateTellsTheWholeStory(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Backoff = v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 10 * time.Second}, MaxAttempts: 2}
	})
	dep, _ := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{Now: now, Signals: kubetest.KernelOnly(src)}, "250m", "128Mi")
	watching := waitOwnerState(t, c, dep, "monitoring", func(st *v1alpha1.RollbackState) bool {
		return st != nil && st.State == v1alpha1.BackoffMonitoring
	})
	rsr := kubetest.GetRSR(t, c, ns, "web")
	require.NotNil(t, watching.Policy)
	assert.Equal(t, *rsr.Status.Policy, *watching.Policy, "the policy reference and its fingerprint")
	assert.NotEmpty(t, watching.Policy.Fingerprint)
	assert.Empty(t, watching.Restoring)

	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)
	src.AddOOMKill(pod.UID, "app", now())
	waitBackoff(t, c, ns, v1alpha1.BackoffBackingOff, 1)
	st := waitOwnerState(t, c, dep, "backingOff", func(st *v1alpha1.RollbackState) bool {
		return st != nil && st.State == v1alpha1.BackoffBackingOff
	})
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, st.Reason)
	assert.Contains(t, st.Message, "oom")
	require.Len(t, st.Restoring, 1, "the values being restored are on the owner")
	assert.Equal(t, "app", st.Restoring[0].Name)
	require.NotNil(t, st.Restoring[0].Requests)
	assert.Equal(t, "256Mi", st.Restoring[0].Requests.Memory.String())
	assert.Nil(t, st.Restoring[0].Requests.CPU, "cpu is not rolled back")
	started := kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeWarning, v1alpha1.EventRollingBackStarted, 1)
	assert.Contains(t, started[0].Note, "after OOMKills")

	offset.Add(int64(11 * time.Second))
	poker(t, c, ns)()
	st = waitOwnerState(t, c, dep, "the completed turn", func(st *v1alpha1.RollbackState) bool {
		return st != nil && st.State != v1alpha1.BackoffBackingOff
	})
	assert.Empty(t, st.Restoring, "cleared when the turn completes")
	require.NotEmpty(t, st.Turns, "the history stays")
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, st.Turns[0].Reason)
}

// TestARollbacksRestoreCarriesItsStateToTheOwner: a Rollout rollback
// writes the owner once: the version whose template holds the restored
// values is the one whose annotation says backingOff, and no write of the
// annotation alone follows (the mirror rides on the restore's patch, one
// write and one Lease read fewer in the rollback's pass).
func TestARollbacksRestoreCarriesItsStateToTheOwner(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	src := signals.NewKernel()
	dep, _ := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Signals: kubetest.KernelOnly(src)}, "250m", "128Mi")
	watching := waitOwnerState(t, c, dep, "monitoring", func(st *v1alpha1.RollbackState) bool {
		return st != nil && st.State == v1alpha1.BackoffMonitoring
	})
	require.NotNil(t, watching)
	var from appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(dep), &from))
	w, err := cp.Clientset.AppsV1().Deployments(ns).Watch(context.Background(),
		metav1.ListOptions{FieldSelector: "metadata.name=web", ResourceVersion: from.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()

	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	time.Sleep(200 * time.Millisecond)
	src.AddOOMKill(pod.UID, "app", time.Now())
	waitBackoff(t, c, ns, v1alpha1.BackoffBackingOff, 1)
	time.Sleep(time.Second) // a mirror of its own would come now
	var versions []*appsv1.Deployment
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if d, ok := ev.Object.(*appsv1.Deployment); ok {
				versions = append(versions, d)
			}
		default:
			done = true
		}
	}
	restored := -1
	for i, d := range versions {
		if d.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String() == "256Mi" {
			restored = i
			break
		}
	}
	require.GreaterOrEqual(t, restored, 0, "no version of the owner had the restored memory (%d versions)", len(versions))
	raw := versions[restored].Annotations[v1alpha1.RollbackStateAnnotation]
	var st v1alpha1.RollbackState
	require.NoError(t, json.Unmarshal([]byte(raw), &st))
	assert.Equal(t, v1alpha1.BackoffBackingOff, st.State, "the restoring version carries the state it ends in")
	for _, d := range versions[restored+1:] {
		assert.NotEqual(t, raw, d.Annotations[v1alpha1.RollbackStateAnnotation], "a later write of the same annotation")
		assert.Equal(t, "256Mi", d.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String())
	}
	assert.Len(t, versions, restored+1, "no write of the owner after the restore")
	recorded, err := policy.AnnotationValue(kubetest.GetRSR(t, c, ns, "web").Status.Rollback)
	require.NoError(t, err)
	assert.Equal(t, recorded, raw, "it is the state the status recorded")
}

// TestPolicyGoneMidWatchRemovesTheOwnerState: the policy deleted while a
// change is watched clears the state with one Normal StateCleared Event,
// and the owner's annotation goes too (it stayed behind before).
func TestPolicyGoneMidWatchRemovesTheOwnerState(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	p := kubetest.PolicyWith(ns, time.Hour, nil)
	dep, _ := leadertest.WatchedWeb(t, c, ns, p, cluster.Config{}, "250m", "128Mi")
	waitOwnerState(t, c, dep, "a state", func(st *v1alpha1.RollbackState) bool { return st != nil })

	require.NoError(t, c.Delete(context.Background(), p))
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)
	assert.Nil(t, rsr.Status.Rollback)
	assert.Nil(t, rsr.Status.Change)
	waitOwnerState(t, c, dep, "no state", func(st *v1alpha1.RollbackState) bool { return st == nil })
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventStateCleared, 1)
}

// TestPolicyGoneMidRollbackFinishesTheRestore stops a leader right after
// it marked the breach and deletes the policy: the next leader finishes
// the restore (before, it cleared the change and kept the breach), then
// clears the state; when a policy comes back the values stay blocked,
// with no restore retried on nothing.
func TestPolicyGoneMidRollbackFinishesTheRestore(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	p := kubetest.PolicyWith(ns, time.Hour, nil)
	dep := kubetest.Web(t, c, ns, p)
	a := leadertest.StartCrashing(t, ns, func(cfg *cluster.Config, crash func(context.Context, *v1alpha1.RightsizingRecommendation)) {
		cfg.AfterBreach = crash
	})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	a.WaitCrashed(t, "marked the breach")
	require.NoError(t, c.Delete(ctx, p))

	leadertest.StartReplica(t, ns, "b", cluster.Config{})
	rsr := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the decided rollback was finished")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 1)
	assert.Nil(t, rsr.Status.Breach, "the breach goes with its change")
	assert.Nil(t, rsr.Status.Change)
	assert.Contains(t, rsr.Status.RolledBackFingerprints, policy.ValueFingerprint(rsr.Spec.Containers))
	waitOwnerState(t, c, dep, "no state", func(st *v1alpha1.RollbackState) bool { return st == nil })
	kubetest.WaitEvents(t, c, ns, "web", corev1.EventTypeNormal, v1alpha1.EventStateCleared, 1)

	p2 := kubetest.PolicyWith(ns, time.Hour, nil)
	require.NoError(t, c.Create(ctx, p2))
	// The memory rollback's cooldown blocks the decrease first; behind
	// it the values are SameValues.
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonCooldown)
	time.Sleep(500 * time.Millisecond)
	rsr = kubetest.GetRSR(t, c, ns, "web")
	assert.Equal(t, v1alpha1.PhaseBlocked, rsr.Status.Phase)
	assert.Empty(t, kubetest.HistoryOf(rsr, v1alpha1.ActionFailed), "no restore retried on a missing change")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())
}

// memoryOnly asks for container app's memory request (and limit, unless
// empty) alone.
func memoryOnly(rsr *v1alpha1.RightsizingRecommendation, request, limit string) {
	rsr.Spec.Containers = []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{Memory: kubetest.Q(request)}}}
	if limit != "" {
		rsr.Spec.Containers[0].Limits = &v1alpha1.ResourceValues{Memory: kubetest.Q(limit)}
	}
}

// TestRestoreToLastHealthyFillsWhatItLacksFromPrevious: the last healthy
// change set only the memory request; the rollback of a later change of
// the request and the limit puts back that request and, from Previous,
// the limit, which before was removed from the template. The owner shows
// the last known good values.
func TestRestoreToLastHealthyFillsWhatItLacksFromPrevious(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	p := kubetest.PolicyWith(ns, 2*time.Second, func(g *v1alpha1.RollbackGuardrails) { g.RestoreTo = v1alpha1.RestoreLastHealthy })
	p.Spec.Guardrails.AllowQoSChange = true // a memory request alone makes the pods Burstable
	dep := kubetest.Web(t, c, ns, p)
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	rsr := kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "128Mi")
	memoryOnly(rsr, "200Mi", "")
	require.NoError(t, c.Create(ctx, rsr))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	kubetest.AdoptedPod(t, c, dep, "web-healthy-1")
	healthy := kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseHealthy, "")
	require.NotNil(t, healthy.Status.LastHealthy)

	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Rollback.WatchDuration = &metav1.Duration{Duration: time.Hour} })
	kubetest.Update(t, c, rsr, func() { memoryOnly(rsr, "128Mi", "128Mi") })
	require.Eventually(t, func() bool {
		r := kubetest.GetRSR(t, c, ns, "web")
		return r.Status.Phase == v1alpha1.PhaseWatching && r.Status.ObservedGeneration == r.Generation
	}, 20*time.Second, 50*time.Millisecond, "the second change was never watched")
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Limits.Memory().String())
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitRestored(t, c, ns, "web")

	res := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "200Mi", res.Requests.Memory().String(), "the last healthy request")
	lim, ok := res.Limits[corev1.ResourceMemory]
	require.True(t, ok, "the memory limit was not deleted")
	assert.Equal(t, "256Mi", lim.String(), "the limit the last healthy change did not touch, from Previous")
	st := ownerState(t, c, dep)
	require.NotNil(t, st)
	require.NotNil(t, st.LastKnownGood, "the last known good values are on the owner")
	assert.Equal(t, healthy.Status.LastHealthy.ValueFingerprint, st.LastKnownGood.ValueFingerprint)
}

// TestRestoreToManifestPutsBackTheLastAppliedTemplate: with restoreTo
// Manifest the rollback restores what the owner last applied
// (kubectl.kubernetes.io/last-applied-configuration), not the values
// before the change.
func TestRestoreToManifestPutsBackTheLastAppliedTemplate(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Deployment(ns, "web", "500m", "256Mi")
	manifest := dep.DeepCopy()
	manifest.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: *kubetest.Q("500m"), corev1.ResourceMemory: *kubetest.Q("300Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: *kubetest.Q("500m"), corev1.ResourceMemory: *kubetest.Q("300Mi")},
	}
	raw, err := json.Marshal(manifest)
	require.NoError(t, err)
	dep.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: string(raw)}
	require.NoError(t, c.Create(ctx, dep))
	require.NoError(t, c.Create(ctx, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) { g.RestoreTo = v1alpha1.RestoreManifest })))
	leadertest.StartReplica(t, ns, "a", cluster.Config{})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, "")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	rsr := kubetest.WaitRestored(t, c, ns, "web")

	res := kubetest.TemplateResources(t, c, dep)
	assert.Equal(t, "300Mi", res.Requests.Memory().String(), "the manifest's request")
	assert.Equal(t, "300Mi", res.Limits.Memory().String(), "the manifest's limit")
	rb := kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack)
	require.Len(t, rb, 1)
	assert.Contains(t, rb[0].Message, "rolled back to Manifest values")
}

// TestRetryTurnIsGovernedByTheBackoff: with maxAttempts 2 and the default
// 24h cooldown, the retry of the same values happens when the backoff
// expires (before, the cooldown blocked it for a day); other values that
// lower memory below what runs are still blocked by the cooldown.
func TestRetryTurnIsGovernedByTheBackoff(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	dep := kubetest.Web(t, c, ns, kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Backoff = v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 10 * time.Second}, MaxAttempts: 2}
	}))
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now, Signals: kubetest.KernelOnly(src)})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
	waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 1)
	pod := kubetest.AdoptedPod(t, c, dep, "web-turn-1")
	time.Sleep(200 * time.Millisecond)
	src.AddOOMKill(pod.UID, "app", now())
	rsr := waitBackoff(t, c, ns, v1alpha1.BackoffBackingOff, 1)
	require.Len(t, rsr.Status.Cooldowns, 1, "memory decreases cool down")

	offset.Add(int64(11 * time.Second))
	poker(t, c, ns)()
	waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 2)
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the retry was applied at the backoff's expiry")

	// New values while the retry is watched wait for its watch (before,
	// they were blocked and the retry, still applied, was watched no
	// more): a kill under the retry's memory still rolls it back.
	rsr = kubetest.GetRSR(t, c, ns, "web")
	kubetest.Update(t, c, rsr, func() { memoryOnly(rsr, "100Mi", "100Mi") })
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseWatching, v1alpha1.ReasonWatchRunning)
	pod = kubetest.AdoptedPod(t, c, dep, "web-turn-2")
	time.Sleep(200 * time.Millisecond)
	src.AddOOMKill(pod.UID, "app", now())
	rsr = waitBackoff(t, c, ns, v1alpha1.BackoffBackingOff, 2)
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionRolledBack), 2, "the retry was rolled back too")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the retry's memory restored")
	// Then the held values are planned: a decrease in cooldown.
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonCooldown)
}

// TestFailedPermanentReopensOnlyForAChangedPolicy: values the backoff gave
// up on stay rolled back under the same policy; a change of the policy
// (its fingerprint) starts a fresh run of them at turn 1.
func TestFailedPermanentReopensOnlyForAChangedPolicy(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	p := kubetest.PolicyWith(ns, time.Hour, func(g *v1alpha1.RollbackGuardrails) {
		g.Cooldown = &metav1.Duration{}
		g.Backoff = v1alpha1.Backoff{TimePeriod: &metav1.Duration{Duration: 10 * time.Second}, MaxAttempts: 1}
	})
	dep := kubetest.Web(t, c, ns, p)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	src := signals.NewKernel()
	leadertest.StartReplica(t, ns, "a", cluster.Config{Now: now, Signals: kubetest.KernelOnly(src)})
	poke := poker(t, c, ns)
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "500m", "128Mi")))
	waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 1)
	pod := kubetest.AdoptedPod(t, c, dep, "web-turn-1")
	time.Sleep(200 * time.Millisecond)
	src.AddOOMKill(pod.UID, "app", now())
	waitBackoff(t, c, ns, v1alpha1.BackoffBackingOff, 1)
	offset.Add(int64(11 * time.Second))
	poke()
	rsr := waitBackoff(t, c, ns, v1alpha1.BackoffFailedPermanent, 1)
	require.NotNil(t, rsr.Status.Rollback.Policy)
	assert.Equal(t, rsr.Status.Policy.Fingerprint, rsr.Status.Rollback.Policy.Fingerprint, "the verdict records its policy state")

	poke()
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "the same policy never retries them")
	assert.Len(t, kubetest.HistoryOf(kubetest.GetRSR(t, c, ns, "web"), v1alpha1.ActionApplied), 1)

	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Rollback.Restarts = ptr32(5) })
	rsr = waitBackoff(t, c, ns, v1alpha1.BackoffMonitoring, 1)
	assert.Len(t, rsr.Status.Rollback.Turns, 1, "a fresh run forgets the old turns")
	assert.NotEqual(t, rsr.Status.Rollback.Policy.Fingerprint, "", "the new policy state is recorded")
	assert.Equal(t, "128Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String(), "applied again under the changed policy")
	assert.Len(t, kubetest.HistoryOf(rsr, v1alpha1.ActionApplied), 2)
}

func ptr32(v int32) *int32 { return &v }

// TestActionsHelpNamesEveryType: kerf_actions_total's help lists every
// action type it counts, healthy included.
func TestActionsHelpNamesEveryType(t *testing.T) {
	m := rightsizing.NewMetrics(prometheus.NewRegistry())
	ch := make(chan *prometheus.Desc, 1)
	m.Actions.Describe(ch)
	desc := (<-ch).String()
	for _, typ := range []v1alpha1.ActionType{v1alpha1.ActionApplied, v1alpha1.ActionRolledBack, v1alpha1.ActionFailed, v1alpha1.ActionHealthy, v1alpha1.ActionBlocked} {
		assert.True(t, strings.Contains(desc, string(typ)), "help names %s: %s", typ, desc)
	}
}
