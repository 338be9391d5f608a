package rightsizing_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// BenchmarkSignalToRollbackRequest measures the leader's decision latency
// on a real apiserver: from an agent's OOM-kill signal (fed to the
// in-process source the stream will feed) to the moment the leader has
// recorded the breach and sends the restore request. Twenty workloads are
// watched; each gets one kill. It reports p50 and p99 in milliseconds.
func BenchmarkSignalToRollbackRequest(b *testing.B) {
	c := controlplane.Get(b).Client
	ctx := context.Background()
	ns := kubetest.Namespace(b, c)
	const n = 20
	src := signals.NewKernel()
	var mu sync.Mutex
	decided := map[string]time.Time{}
	leadertest.StartReplica(b, ns, "a", cluster.Config{Signals: kubetest.KernelOnly(src), AfterBreach: func(_ context.Context, rsr *v1alpha1.RightsizingRecommendation) {
		mu.Lock()
		decided[rsr.Name] = time.Now()
		mu.Unlock()
	}})
	if err := c.Create(ctx, kubetest.PolicyWith(ns, time.Hour, nil)); err != nil {
		b.Fatal(err)
	}
	pods := make([]types.UID, n)
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		dep := kubetest.Deployment(ns, name, "500m", "256Mi")
		if err := c.Create(ctx, dep); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, kubetest.Recommendation(ns, name, name, v1alpha1.StrategyRollout, "500m", "128Mi")); err != nil {
			b.Fatal(err)
		}
		kubetest.WaitPhase(b, c, ns, name, v1alpha1.PhaseWatching, "")
		pods[i] = kubetest.AdoptedPod(b, c, dep, name+"-new").UID
	}
	time.Sleep(time.Second) // the pods reach the leader's cache
	b.ResetTimer()
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		src.AddOOMKill(pods[i], "app", sent[i])
		time.Sleep(50 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(decided)
		mu.Unlock()
		if done == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if len(decided) != n {
		b.Fatalf("%d of %d breaches decided", len(decided), n)
	}
	lat := make([]float64, n)
	for i := range n {
		lat[i] = float64(decided[fmt.Sprintf("web-%d", i)].Sub(sent[i]).Microseconds()) / 1000
	}
	slices.Sort(lat)
	b.ReportMetric(lat[n/2], "p50-ms")
	b.ReportMetric(lat[n*99/100], "p99-ms")
	b.Logf("signal -> rollback request over %d workloads: p50 %.1f ms, p99 %.1f ms, max %.1f ms", n, lat[n/2], lat[n*99/100], lat[n-1])
}

// BenchmarkPodUpdateFanOut measures what one pod status update costs the
// leader on a real apiserver with 500 watched recommendations in one
// namespace (each of its own Deployment): the reconciles up to the breach
// decision of the pod's workload's recommendation, and the time to it; and
// the reconciles a pod update of a workload without a recommendation
// causes.
func BenchmarkPodUpdateFanOut(b *testing.B) {
	f := newFanout(b, 500)
	time.Sleep(2 * time.Second) // the pods reach the leader's cache
	base := settledReconciles(b, 2*time.Second)
	f.restart(b, f.orphan)
	afterOrphan := settledReconciles(b, 2*time.Second)
	b.ResetTimer()
	sent := f.restart(b, f.pods[250])
	decided := f.untilBreach(b, "web-250")
	toDecision := toBreach(b, afterOrphan)
	b.StopTimer()
	all := settledReconciles(b, 2*time.Second)
	b.ReportMetric(afterOrphan-base, "orphan-reconciles")
	b.ReportMetric(toDecision, "reconciles-to-breach")
	b.ReportMetric(float64(decided.Sub(sent).Microseconds())/1000, "ms-to-breach")
	b.Logf("orphan pod update: %.0f reconciles; watched pod update: %.0f reconciles up to the breach decision (%.0f until quiet), breach after %.1f ms",
		afterOrphan-base, toDecision, all-afterOrphan, float64(decided.Sub(sent).Microseconds())/1000)
}
