package cluster

import (
	"cmp"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/kube"
)

// clients holds what New builds for the writers: the fenced REST
// configuration, clientsets over it and over the rollbacks' budget, and
// the applies' gate. docs/leader.md, "The clients and their budgets",
// has the design.
type clients struct {
	// leaseTimeout bounds a request of the Lease's clients and of the
	// rollbacks', well below the renew deadline.
	leaseTimeout time.Duration
	// fenced writes only while the replica holds the Lease, after the
	// rollbacks in progress (gate).
	fenced *rest.Config
	// gate is the applies' yield to rollbacks; nil with fence.NoApplyYield.
	gate                               *fence.RollbackGate
	fencedClientset, rollbackClientset kubernetes.Interface
}

// complete checks cfg, naming the field at fault, and fills in the
// defaults of the fields left zero.
func (cfg *Config) complete() error {
	if cfg.Namespace == "" || cfg.LeaseName == "" || cfg.Identity == "" {
		return fmt.Errorf("leader config: namespace (%q), lease name (%q) and identity (%q) must be set", cfg.Namespace, cfg.LeaseName, cfg.Identity)
	}
	if cfg.Workers < 0 {
		return fmt.Errorf("leader config: workers (%d) must be at least 1, or 0 for %d", cfg.Workers, rightsizing.DefaultWorkers)
	}
	if cfg.RollbackWorkers < rightsizing.NoRollbackWorkers {
		return fmt.Errorf("leader config: rollback workers (%d) must be at least 1, 0 for the default (%d), or NoRollbackWorkers (%d) for none",
			cfg.RollbackWorkers, rightsizing.DefaultRollbackWorkers, rightsizing.NoRollbackWorkers)
	}
	if cfg.ApplyYield < 0 && cfg.ApplyYield != fence.NoApplyYield {
		return fmt.Errorf("leader config: apply yield (%s) must be positive, 0 for the default (%s), or NoApplyYield for none",
			cfg.ApplyYield, fence.DefaultApplyYield)
	}
	if cfg.RollbackQPS < 0 || cfg.RollbackBurst < 0 {
		return fmt.Errorf("leader config: rollback QPS (%g) and burst (%d) must be positive, or 0 for %d and %d",
			cfg.RollbackQPS, cfg.RollbackBurst, fence.DefaultRollbackQPS, fence.DefaultRollbackBurst)
	}
	cfg.RollbackQPS = cmp.Or(cfg.RollbackQPS, fence.DefaultRollbackQPS)
	cfg.RollbackBurst = cmp.Or(cfg.RollbackBurst, fence.DefaultRollbackBurst)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, 15*time.Second)
	cfg.RenewDeadline = cmp.Or(cfg.RenewDeadline, 10*time.Second)
	cfg.RetryPeriod = cmp.Or(cfg.RetryPeriod, 2*time.Second)
	return nil
}

// newElection builds the Lease's clients, the fence and the manager,
// whose elector holds the Lease through the fence's lock.
func (l *Leader) newElection() (*clients, error) {
	cfg := l.cfg
	// The Lease client gives up on a request well before the renew
	// deadline, so one hung request cannot cost the lease.
	c := &clients{leaseTimeout: max(cfg.RenewDeadline/2, time.Second)}
	leaseConfig := rest.CopyConfig(l.restConfig)
	leaseConfig.Timeout = c.leaseTimeout
	leaseClient, err := kubernetes.NewForConfig(leaseConfig)
	if err != nil {
		return nil, fmt.Errorf("lease client: %w", err)
	}
	// Every write of the reconciler, the applier, the recommender and the
	// hub forwarder goes through the fence (docs/leader.md, "Fencing").
	// It passes only while the Lease's newest renew is younger than the
	// renew deadline and the Lease, read live, names this replica. Its
	// live reads of the Lease have a client of their own, so that they
	// never take the elector's turn in its rate limiter.
	fenceClient, err := kubernetes.NewForConfig(leaseConfig)
	if err != nil {
		return nil, fmt.Errorf("fence client: %w", err)
	}
	l.fence = fence.New(cfg.Identity, cfg.RenewDeadline, fenceClient.CoordinationV1().Leases(cfg.Namespace), cfg.LeaseName, l.registry, l.log)
	lock := fence.Lock{Fence: l.fence, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
		Client:     leaseClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
	// The cache keeps no managed fields, and of pods nothing Kerf never
	// reads. kerf_leader_cached_objects gives its informers' sizes
	// (cluster/cachestore).
	cacheOpts := cache.Options{DefaultTransform: cachestore.Transform, NewInformer: cachestore.NewObjectCounts(l.registry).NewInformer}
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	l.mgr, err = ctrl.NewManager(l.restConfig, ctrl.Options{
		Cache:                               cacheOpts,
		NewCache:                            cachestore.NewCache, // lists by a field index read the value's bucket
		Scheme:                              kube.Scheme,
		Logger:                              logr.FromSlogHandler(l.log.Handler()),
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:              "0",
		LeaderElection:                      true,
		LeaderElectionID:                    cfg.LeaseName,
		LeaderElectionNamespace:             cfg.Namespace,
		LeaderElectionReleaseOnCancel:       true,
		GracefulShutdownTimeout:             ptr.To(ShutdownTimeout),
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &cfg.LeaseDuration,
		RenewDeadline:                       &cfg.RenewDeadline,
		RetryPeriod:                         &cfg.RetryPeriod,
	})
	if err != nil {
		return nil, fmt.Errorf("build manager: %w", err)
	}
	return c, nil
}

// newWriters builds the clients that write, in two pairs.
//   - the fenced client and clientset of the applies, the recommender
//     and the hub forwarder, behind the applies' gate;
//   - the rollbacks' own pair, on a budget the applies never spend.
func (l *Leader) newWriters(c *clients) error {
	cfg := l.cfg
	c.fenced = rest.CopyConfig(l.restConfig)
	c.fenced.Wrap(l.fence.Wrap)
	// Outermost, so that a write waits for the rollbacks before its
	// fence reads the Lease.
	if cfg.ApplyYield != fence.NoApplyYield {
		c.gate = fence.NewRollbackGate(cmp.Or(cfg.ApplyYield, fence.DefaultApplyYield), l.registry)
		c.fenced.Wrap(c.gate.Wrap)
	}
	writer, err := client.New(c.fenced, client.Options{Scheme: kube.Scheme, Mapper: l.mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: l.mgr.GetCache()}})
	if err != nil {
		return fmt.Errorf("fenced client: %w", err)
	}
	if c.fencedClientset, err = kubernetes.NewForConfig(c.fenced); err != nil {
		return fmt.Errorf("fenced clientset: %w", err)
	}
	// The reconciler and the applier read a workload's pods and
	// ReplicaSets through the cache's controller index, which
	// SetupWithManager registers.
	l.writer = workload.Indexed(writer)
	l.rollbackWriter, c.rollbackClientset, err = fence.RollbackClients(l.restConfig, c.leaseTimeout, l.fence, cfg.Namespace,
		cfg.RollbackQPS, cfg.RollbackBurst, l.mgr, l.registry)
	return err
}
