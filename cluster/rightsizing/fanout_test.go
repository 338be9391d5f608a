package rightsizing_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// reconciles returns how many reconciles the recommendation controllers in
// this process have finished, from controller-runtime's
// controller_runtime_reconcile_total (the tests run one leader at a time).
func reconciles(t testing.TB) float64 {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "rightsizingrecommendation" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// settledReconciles waits until no reconcile has finished for quiet and
// returns the count then.
func settledReconciles(t testing.TB, quiet time.Duration) float64 {
	t.Helper()
	last, since := reconciles(t), time.Now()
	for time.Since(since) < quiet {
		time.Sleep(50 * time.Millisecond)
		if n := reconciles(t); n != last {
			last, since = n, time.Now()
		}
	}
	return last
}

// toBreach returns the reconciles since base up to a breach decision, the
// deciding one included: AfterBreach runs inside that reconcile, which the
// metric counts only once it returns, and the controller never runs one
// recommendation twice at once (its workers run others, which the test
// keeps quiet).
func toBreach(t testing.TB, base float64) float64 {
	t.Helper()
	return reconciles(t) - base + 1
}

// fanout is n watched recommendations web-0 … web-(n-1) in one namespace,
// each of its own Deployment with one pod, and a Deployment "orphan" with a
// pod and no recommendation.
type fanout struct {
	c      client.Client
	pods   []*corev1.Pod
	orphan *corev1.Pod
	mu     sync.Mutex
	breach map[string]time.Time
}

func newFanout(t testing.TB, n int) *fanout {
	t.Helper()
	c := controlplane.Get(t).Client
	ctx := context.Background()
	ns := kubetest.Namespace(t, c)
	f := &fanout{c: c, breach: map[string]time.Time{}}
	var mu sync.Mutex
	watching := map[string]bool{}
	leadertest.StartReplica(t, ns, "a", cluster.Config{
		AfterRecord: func(_ context.Context, rsr *v1alpha1.RightsizingRecommendation) {
			mu.Lock()
			watching[rsr.Name] = true
			mu.Unlock()
		},
		AfterBreach: func(_ context.Context, rsr *v1alpha1.RightsizingRecommendation) {
			f.mu.Lock()
			f.breach[rsr.Name] = time.Now()
			f.mu.Unlock()
		},
	})
	require.NoError(t, c.Create(ctx, kubetest.PolicyWith(ns, time.Hour, nil)))
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		dep := kubetest.Deployment(ns, name, "500m", "256Mi")
		require.NoError(t, c.Create(ctx, dep))
		require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, name, name, v1alpha1.StrategyRollout, "500m", "128Mi")))
	}
	orphan := kubetest.Deployment(ns, "orphan", "500m", "256Mi")
	require.NoError(t, c.Create(ctx, orphan))
	f.orphan = kubetest.AdoptedPod(t, c, orphan, "orphan-1")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(watching) == n
	}, 5*time.Minute, 50*time.Millisecond, "every recommendation is watched")
	// The pods run the applied values: created after the change, as a
	// rollout would.
	for i := range n {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", i)}}
		f.pods = append(f.pods, kubetest.AdoptedPod(t, c, dep, dep.Name+"-new"))
	}
	return f
}

// restart writes a container restart into the pod's status, as the
// kubelet would: for a watched workload a breach of the restart guardrail.
func (f *fanout) restart(t testing.TB, pod *corev1.Pod) time.Time {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	pod.Status.ContainerStatuses[0].RestartCount += 10
	at := time.Now()
	require.NoError(t, f.c.Status().Update(ctx, pod))
	return at
}

// untilBreach waits for the breach of recommendation name and returns when
// it was decided.
func (f *fanout) untilBreach(t testing.TB, name string) time.Time {
	t.Helper()
	var at time.Time
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		at = f.breach[name]
		return !at.IsZero()
	}, time.Minute, 5*time.Millisecond, "the breach of %s is decided", name)
	return at
}

// TestAPodUpdateReconcilesItsWorkloadsRecommendationOnly: a pod status
// update reconciles the one recommendation whose targetRef names the pod's
// workload, and a pod of a workload without a recommendation reconciles
// none. The count is the controller's, so a watch's periodic recheck that
// lands in the window adds one: each figure is the least of three tries.
// Fanning out to the namespace would add 20 to every try.
func TestAPodUpdateReconcilesItsWorkloadsRecommendationOnly(t *testing.T) {
	f := newFanout(t, 20)
	time.Sleep(time.Second) // the pods reach the leader's cache
	orphan, watched := math.Inf(1), math.Inf(1)
	for try := range 3 {
		before := settledReconciles(t, time.Second)
		f.restart(t, f.orphan)
		afterOrphan := settledReconciles(t, time.Second)
		orphan = min(orphan, afterOrphan-before)

		name := fmt.Sprintf("web-%d", 3+try)
		f.restart(t, f.pods[3+try])
		f.untilBreach(t, name)
		// The breach's own writes (status, the restore) come back as
		// events of that recommendation itself; count only the
		// reconciles up to the decision.
		watched = min(watched, toBreach(t, afterOrphan))
	}
	assert.Equal(t, 0.0, orphan, "reconciles for a pod of a workload without a recommendation")
	assert.Equal(t, 1.0, watched, "reconciles up to the breach decision")
}
