package fence

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
)

// RollbackClients builds the rollbacks' fenced client and clientset, in a
// token bucket of their own (docs/leader.md, "The clients and their
// budgets").
//
// The bucket, of qps and burst, holds every request they make. That
// includes the live Lease reads that fence their writes, which they share
// only between themselves. Those reads read f's Lease in namespace, with
// leaseTimeout. The bucket's waits are
// kerf_leader_rollback_client_wait_seconds.
//
// The other clients each keep client-go's bucket per client, and per kind
// for the manager's. A wave of applies fills them: a rollback written
// through them waited its turn behind the applies' writes and their Lease
// reads.
func RollbackClients(restConfig *rest.Config, leaseTimeout time.Duration, f *Fence, namespace string, qps float32, burst int, mgr manager.Manager, reg prometheus.Registerer) (client.Client, kubernetes.Interface, error) {
	waits := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kerf_leader_rollback_client_wait_seconds",
		Help:    "How long the rollbacks' requests (their writes and the Lease reads that fence them) waited for their own client-side rate limit.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	})
	reg.MustRegister(waits)
	budget := rest.CopyConfig(restConfig)
	budget.QPS, budget.Burst = qps, burst
	budget.RateLimiter = waitObserver{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(qps, burst), waits: waits}
	leaseConfig := rest.CopyConfig(budget)
	leaseConfig.Timeout = leaseTimeout
	leases, err := kubernetes.NewForConfig(leaseConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("rollbacks' fence client: %w", err)
	}
	budget.Wrap(f.wrapReading(f.reader(leases.CoordinationV1().Leases(namespace))))
	w, err := client.New(budget, client.Options{Scheme: kube.Scheme, Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		return nil, nil, fmt.Errorf("rollbacks' fenced client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(budget)
	if err != nil {
		return nil, nil, fmt.Errorf("rollbacks' fenced clientset: %w", err)
	}
	return workload.Indexed(w), cs, nil
}

// waitObserver is a client's rate limiter that observes each request's
// wait.
type waitObserver struct {
	flowcontrol.RateLimiter
	waits prometheus.Observer
}

// Wait implements flowcontrol.RateLimiter, observing the wait.
func (o waitObserver) Wait(ctx context.Context) error {
	start := time.Now()
	err := o.RateLimiter.Wait(ctx)
	o.waits.Observe(time.Since(start).Seconds())
	return err
}

// DefaultRollbackQPS and DefaultRollbackBurst are the rollbacks' client
// budget by default: the leader's --rollback-api-qps and
// --rollback-api-burst. The burst holds a 100-replica in-place restore, a
// resize per pod, at once. Rollbacks are rare, so the budget is idle
// nearly always.
const (
	DefaultRollbackQPS   = 25
	DefaultRollbackBurst = 100
)
