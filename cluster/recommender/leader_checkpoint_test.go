package recommender_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/recommend"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// checkpointingConfig is a leader whose recommender reads every 200 ms and
// writes a changed checkpoint every 300 ms.
func checkpointingConfig(sig *signals.Stores) cluster.Config {
	return cluster.Config{Signals: sig, Recommender: recommender.Config{Period: 200 * time.Millisecond, CheckpointInterval: 300 * time.Millisecond}}
}

// feedUsage adds n readings one second apart, ending at end, of container
// app of pod using 50m (its CPU counter from cpu0) and 40Mi.
func feedUsage(sig *signals.Stores, pod *corev1.Pod, end time.Time, cpu0 time.Duration, n int) {
	for i := range n {
		sig.Usage.Add(signals.UsageSample{PodUID: pod.UID, Container: "app", At: end.Add(time.Duration(i-n+1) * time.Second),
			CPU: cpu0 + time.Duration(i)*50*time.Millisecond, WorkingSet: 40 << 20, Peak: 40 << 20})
	}
}

// waitCheckpoint waits until the checkpoint of web holds container app
// with at least samples CPU samples, and returns it.
func waitCheckpoint(t *testing.T, c client.Client, ns string, samples uint32) *v1alpha1.RightsizingCheckpoint {
	t.Helper()
	m, err := recommend.NewModel(recommend.DefaultParams())
	require.NoError(t, err)
	var ck v1alpha1.RightsizingCheckpoint
	require.Eventually(t, func() bool {
		if c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &ck) != nil || len(ck.Status.Containers) != 1 {
			return false
		}
		st, err := recommend.LoadCheckpoint(m, ck.Status.Containers[0].Data)
		return err == nil && st.Samples() >= samples
	}, 30*time.Second, 50*time.Millisecond, "no checkpoint of web with %d samples", samples)
	return &ck
}

// stopLeader stops l and waits until it has returned (its checkpoints
// written at shutdown).
func stopLeader(t *testing.T, l *leadertest.Replica) {
	t.Helper()
	l.Stop()
	err := <-l.Done
	l.Done <- err // for the test's cleanup
	require.NoError(t, err)
}

// TestRecommenderResumesFromItsCheckpointAfterFailover checks issue 13's
// "state survives failover": leader a feeds web's usage and writes a
// checkpoint; a stops; leader b, with nothing in memory and two new
// readings (one CPU sample), makes a recommendation whose basis counts a's
// three samples and its own, with a's values.
func TestRecommenderResumesFromItsCheckpointAfterFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, ns, kubetest.RecommendingPolicy(ns))
	sigA := signals.New()
	a := leadertest.StartReplica(t, ns, "a", checkpointingConfig(sigA))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	now := time.Now()
	feedUsage(sigA, pod, now, 0, 4)
	first, basisA := kubetest.WaitRecommended(t, c, ns)
	ck := waitCheckpoint(t, c, ns, 3)
	assert.Equal(t, v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"}, ck.Spec.TargetRef)
	assert.Equal(t, v1alpha1.RecommendedByKerf, ck.Labels[v1alpha1.RecommendedByLabel])
	require.Len(t, ck.OwnerReferences, 1, "owned by the workload, so it goes with it")
	assert.Equal(t, dep.UID, ck.OwnerReferences[0].UID)
	assert.Equal(t, "app", ck.Status.Containers[0].Name)
	assert.Equal(t, int32(recommend.CheckpointVersion), ck.Status.Containers[0].Version)
	assert.Len(t, ck.Status.Containers[0].Fingerprint, 8)
	assert.NotNil(t, ck.Status.WrittenAt)
	// The counter goes up once the write returned, which can be after the
	// checkpoint is seen here.
	assert.Eventually(t, func() bool { return leadertest.MetricValue(t, a, "kerf_recommender_checkpoints_written_total") > 0 },
		time.Minute, 10*time.Millisecond, "kerf_recommender_checkpoints_written_total")
	stopLeader(t, a)

	// b makes its own recommendation: a's is removed, so b's basis shows.
	require.NoError(t, c.Delete(ctx, first))
	sigB := signals.New() // the agents' next readings, before b's first pass
	feedUsage(sigB, pod, now.Add(2*time.Second), 10*time.Second, 2)
	b := leadertest.StartReplica(t, ns, "b", checkpointingConfig(sigB))
	second, basisB := waitRecommendedBy(t, c, ns)
	assert.Equal(t, uint32(4), basisB.Containers[0].Samples, "a's three CPU samples carried over, and b's one")
	assert.Greater(t, basisB.Containers[0].Confidence, basisA.Containers[0].Confidence)
	assert.Equal(t, first.Spec.Containers, second.Spec.Containers, "b recommends what a did")
	assert.Equal(t, 1.0, leadertest.MetricValue(t, b, "kerf_recommender_checkpoint_containers_loaded_total"))
	assert.Equal(t, 0.0, leadertest.MetricValue(t, b, "kerf_recommender_checkpoint_containers_refused_total", "reason", "corrupt"))
}

// waitRecommendedBy waits for the recommender's recommendation for web
// and returns it with its basis, whatever its sample count.
func waitRecommendedBy(t *testing.T, c client.Client, ns string) (*v1alpha1.RightsizingRecommendation, v1alpha1.RecommendationBasis) {
	t.Helper()
	var rsr v1alpha1.RightsizingRecommendation
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &rsr) == nil
	}, 30*time.Second, 50*time.Millisecond, "the recommender made no recommendation")
	var basis v1alpha1.RecommendationBasis
	require.NoError(t, json.Unmarshal([]byte(rsr.Annotations[v1alpha1.RecommendationBasisAnnotation]), &basis))
	require.Len(t, basis.Containers, 1)
	return &rsr, basis
}

// TestRecommenderIgnoresACheckpointItCannotLoad checks that a checkpoint
// with a corrupt container and one of another model is ignored, counted
// by reason and logged, the leader starting that history from nothing; it
// is then replaced by one it can load.
func TestRecommenderIgnoresACheckpointItCannotLoad(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, ns, kubetest.RecommendingPolicy(ns))
	m, err := recommend.NewModel(recommend.DefaultParams())
	require.NoError(t, err)
	bad := &v1alpha1.RightsizingCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}},
		Spec:       v1alpha1.RightsizingCheckpointSpec{TargetRef: v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"}},
		Status: v1alpha1.RightsizingCheckpointStatus{Containers: []v1alpha1.ContainerCheckpoint{
			{Name: "app", Version: 1, Fingerprint: recommender.Fingerprint(m), Data: []byte("not a checkpoint"), WrittenAt: metav1.Now()},
			{Name: "sidecar", Version: 1, Fingerprint: "00000000", Data: []byte("KRCP"), WrittenAt: metav1.Now()},
		}},
	}
	require.NoError(t, c.Create(ctx, bad))
	sig := signals.New()
	l := leadertest.StartReplica(t, ns, "a", checkpointingConfig(sig))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	feedUsage(sig, pod, time.Now(), 0, 4)
	_, basis := kubetest.WaitRecommended(t, c, ns) // three samples: nothing carried over
	assert.Equal(t, uint32(3), basis.Containers[0].Samples)
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_recommender_checkpoint_containers_refused_total", "reason", "corrupt"))
	assert.Equal(t, 1.0, leadertest.MetricValue(t, l, "kerf_recommender_checkpoint_containers_refused_total", "reason", "fingerprint"))
	assert.Equal(t, 0.0, leadertest.MetricValue(t, l, "kerf_recommender_checkpoint_containers_loaded_total"))
	ck := waitCheckpoint(t, c, ns, 3)
	assert.Equal(t, "app", ck.Status.Containers[0].Name, "rewritten whole: the refused containers are gone")
}

// TestRecommenderDeletesTheCheckpointsOfWorkloadsThatAreGone checks that
// a deleted workload's checkpoint is deleted by the leader that tracked
// it, and that one left by a former leader for a workload that no longer
// exists is collected (the control plane runs no garbage collector).
func TestRecommenderDeletesTheCheckpointsOfWorkloadsThatAreGone(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	dep := kubetest.Web(t, c, ns, kubetest.RecommendingPolicy(ns))
	m, err := recommend.NewModel(recommend.DefaultParams())
	require.NoError(t, err)
	var empty recommend.ContainerState
	ghost := &v1alpha1.RightsizingCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost", Labels: map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf}},
		Spec:       v1alpha1.RightsizingCheckpointSpec{TargetRef: v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "ghost"}},
		Status: v1alpha1.RightsizingCheckpointStatus{Containers: []v1alpha1.ContainerCheckpoint{
			{Name: "app", Version: 1, Fingerprint: recommender.Fingerprint(m), Data: empty.AppendCheckpoint(m, nil), WrittenAt: metav1.Now()},
		}},
	}
	require.NoError(t, c.Create(ctx, ghost))
	sig := signals.New()
	l := leadertest.StartReplica(t, ns, "a", checkpointingConfig(sig))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	feedUsage(sig, pod, time.Now(), 0, 4)
	waitCheckpoint(t, c, ns, 3)
	gone := func(name string) func() bool {
		return func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.RightsizingCheckpoint{}))
		}
	}
	require.Eventually(t, gone("ghost"), 15*time.Second, 50*time.Millisecond, "the checkpoint of a workload that does not exist is kept")

	require.NoError(t, c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}))
	require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1"}}, client.GracePeriodSeconds(0)))
	require.Eventually(t, gone("web"), 15*time.Second, 50*time.Millisecond, "the checkpoint of a deleted workload is kept")
	// The counter goes up after the delete returns, which the test can
	// see first.
	require.Eventually(t, func() bool { return leadertest.MetricValue(t, l, "kerf_recommender_checkpoints_deleted_total") == 2 },
		15*time.Second, 50*time.Millisecond, "kerf_recommender_checkpoints_deleted_total counts both deletes")
}

// TestRecommenderDeletesTheCheckpointWhenThePolicyNoLongerRecommends
// checks that turning spec.recommend off forgets the workload's history
// and its checkpoint.
func TestRecommenderDeletesTheCheckpointWhenThePolicyNoLongerRecommends(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	p := kubetest.RecommendingPolicy(ns)
	dep := kubetest.Web(t, c, ns, p)
	sig := signals.New()
	leadertest.StartReplica(t, ns, "a", checkpointingConfig(sig))
	pod := kubetest.AdoptedPod(t, c, dep, "web-1")
	feedUsage(sig, pod, time.Now(), 0, 4)
	waitCheckpoint(t, c, ns, 3)
	kubetest.Update(t, c, p, func() { p.Spec.Recommend.Enabled = false })
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &v1alpha1.RightsizingCheckpoint{}))
	}, 15*time.Second, 50*time.Millisecond, "the checkpoint of a workload no longer recommended for is kept")
}
