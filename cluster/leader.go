package cluster

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/internal/kube"
)

// Leader is one kerf-leader replica. Every replica runs; the one that holds
// the Lease applies and rolls back.
type Leader struct {
	cfg        Config
	restConfig *rest.Config
	log        *slog.Logger
	mgr        manager.Manager
	registry   *prometheus.Registry
	// Metrics are the replica's metrics, on its own registry.
	Metrics *rightsizing.Metrics
	stream  *stream.Server
	// authn checks the callers of /metrics, the audit API and the pages.
	authn *authn.Authenticator
	// serverTLSBySource holds the TLS configuration of each certificate
	// source Run resolved (serverTLS), so servers that share one share it.
	serverTLSBySource map[string]resolvedCert
	// streamIssuer is the stream's self-managed certificate, which signs
	// the agents' /metrics certificates; nil until Run resolved it, and
	// for a certificate of the user's.
	streamIssuer atomic.Pointer[cert.SelfManaged]
	// usage is the usage series of the workload pages.
	usage *pages.UsageSeries
	// recommendations reads every recommendation from the cache's own
	// objects, for the periodic passes (cachestore.Recommendations).
	recommendations forward.Recommendations
	// synced is set once the caches are synced: the replica is ready.
	synced atomic.Bool
	// stopping is set as soon as Run's context is done: from then on the
	// replica no longer leads, although the manager keeps renewing the
	// Lease until its controllers have stopped and then releases it.
	stopping atomic.Bool
	// fence lets writes through only while the Lease is held (cluster/fence);
	// writer is the client whose writes it fences.
	fence  *fence.Fence
	writer client.Client
	// rollbackWriter is the rollbacks' client (fence.RollbackClients), fenced
	// as writer is.
	rollbackWriter client.Client
}

// New builds a leader replica for the cluster restConfig reaches.
func New(cfg Config, restConfig *rest.Config, log *slog.Logger) (*Leader, error) {
	if cfg.Namespace == "" || cfg.LeaseName == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("leader config: namespace (%q), lease name (%q) and identity (%q) must be set", cfg.Namespace, cfg.LeaseName, cfg.Identity)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("leader config: workers (%d) must be at least 1, or 0 for %d", cfg.Workers, rightsizing.DefaultWorkers)
	}
	if cfg.RollbackWorkers < rightsizing.NoRollbackWorkers {
		return nil, fmt.Errorf("leader config: rollback workers (%d) must be at least 1, 0 for the default (%d), or NoRollbackWorkers (%d) for none",
			cfg.RollbackWorkers, rightsizing.DefaultRollbackWorkers, rightsizing.NoRollbackWorkers)
	}
	if cfg.ApplyYield < 0 && cfg.ApplyYield != NoApplyYield {
		return nil, fmt.Errorf("leader config: apply yield (%s) must be positive, 0 for the default (%s), or NoApplyYield for none",
			cfg.ApplyYield, DefaultApplyYield)
	}
	if cfg.RollbackQPS < 0 || cfg.RollbackBurst < 0 {
		return nil, fmt.Errorf("leader config: rollback QPS (%g) and burst (%d) must be positive, or 0 for %d and %d",
			cfg.RollbackQPS, cfg.RollbackBurst, DefaultRollbackQPS, DefaultRollbackBurst)
	}
	if cfg.RollbackQPS == 0 {
		cfg.RollbackQPS = DefaultRollbackQPS
	}
	if cfg.RollbackBurst == 0 {
		cfg.RollbackBurst = DefaultRollbackBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	dur(&cfg.LeaseDuration, 15*time.Second)
	dur(&cfg.RenewDeadline, 10*time.Second)
	dur(&cfg.RetryPeriod, 2*time.Second)
	// The Lease client gives up on a request well before the renew
	// deadline, so one hung request cannot cost the lease.
	leaseConfig := rest.CopyConfig(restConfig)
	leaseConfig.Timeout = max(cfg.RenewDeadline/2, time.Second)
	leaseClient, err := kubernetes.NewForConfig(leaseConfig)
	if err != nil {
		return nil, fmt.Errorf("lease client: %w", err)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// Every write of the reconciler, the applier, the recommender and the
	// hub forwarder goes through the fence: only while the Lease's newest
	// renew is younger than the renew deadline and the Lease, read live,
	// names this replica (docs/leader.md, "Fencing").
	// Its live reads of the Lease have a client of their own, so that
	// they never take the elector's turn in its rate limiter, with the
	// writes' rate (one read per write) and the Lease client's timeout.
	fenceConfig := rest.CopyConfig(restConfig)
	fenceConfig.Timeout = leaseConfig.Timeout
	fenceClient, err := kubernetes.NewForConfig(fenceConfig)
	if err != nil {
		return nil, fmt.Errorf("fence client: %w", err)
	}
	fnc := fence.New(cfg.Identity, cfg.RenewDeadline, fenceClient.CoordinationV1().Leases(cfg.Namespace), cfg.LeaseName, reg, log)
	lock := fence.Lock{Fence: fnc, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
		Client:     leaseClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
	// The cache keeps no managed fields, and of pods nothing Kerf never
	// reads (cluster/cachestore).
	// Its informers' sizes are kerf_leader_cached_objects.
	cacheOpts := cache.Options{DefaultTransform: cachestore.Transform, NewInformer: cachestore.NewObjectCounts(reg).NewInformer}
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Cache:                               cacheOpts,
		NewCache:                            cachestore.NewCache, // lists by a field index read the value's bucket
		Scheme:                              kube.Scheme,
		Logger:                              logr.FromSlogHandler(log.Handler()),
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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l := &Leader{cfg: cfg, restConfig: restConfig, log: log, mgr: mgr, registry: reg, Metrics: rightsizing.NewMetrics(reg), fence: fnc}
	if l.authn, err = authn.New(authn.Config{REST: restConfig, OwnAudience: authn.Audience}); err != nil {
		return nil, fmt.Errorf("endpoints' authentication: %w", err)
	}
	fencedConfig := rest.CopyConfig(restConfig)
	fencedConfig.Wrap(fnc.Wrap)
	// Outermost, so that a write waits for the rollbacks before its
	// fence reads the Lease.
	var gate *fence.RollbackGate
	if cfg.ApplyYield != NoApplyYield {
		gate = fence.NewRollbackGate(cmp.Or(cfg.ApplyYield, DefaultApplyYield), reg)
		fencedConfig.Wrap(gate.Wrap)
	}
	writer, err := client.New(fencedConfig, client.Options{Scheme: kube.Scheme, Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		return nil, fmt.Errorf("fenced client: %w", err)
	}
	fencedCS, err := kubernetes.NewForConfig(fencedConfig)
	if err != nil {
		return nil, fmt.Errorf("fenced clientset: %w", err)
	}
	// The reconciler and the applier read a workload's pods and
	// ReplicaSets through the cache's controller index (SetupWithManager
	// registers it).
	writer = workload.Indexed(writer)
	l.writer = writer
	rollbackWriter, rollbackCS, err := fence.RollbackClients(restConfig, leaseConfig.Timeout, fnc, cfg.Namespace, cfg.RollbackQPS, cfg.RollbackBurst, mgr, reg)
	if err != nil {
		return nil, err
	}
	l.rollbackWriter = rollbackWriter

	sig := cfg.Signals
	if sig == nil {
		sig = signals.New()
	}
	if cfg.Stream.Listener != nil {
		// The agents' TokenReviews (and their pods' reads) on a budget of
		// their own, sized for a connect storm rather than the
		// --kube-api-qps every other client has: at 50 a second, the
		// 1,000 streams a failover reopens took 20 s to authenticate
		// (docs/performance.md, "The fourth round"). The handshakes in
		// flight are bounded anyway (--stream-max-handshakes).
		reviewConfig := rest.CopyConfig(restConfig)
		reviewConfig.QPS = agentReviewQPS
		reviewConfig.Burst = cmp.Or(cfg.Stream.Limits.MaxHandshakes, stream.DefaultMaxHandshakes)
		reviews, err := kubernetes.NewForConfig(reviewConfig)
		if err != nil {
			return nil, fmt.Errorf("stream: TokenReviews' client: %w", err)
		}
		if err := cfg.Stream.Cert.Validate(); err != nil {
			return nil, fmt.Errorf("stream: a listener without a certificate (agents send their tokens on it): %w", err)
		}
		l.stream, err = stream.New(stream.Config{
			Audience:                cfg.Stream.Audience,
			ServiceAccountNamespace: cfg.Stream.ServiceAccountNamespace,
			ServiceAccountName:      cfg.Stream.ServiceAccountName,
			Clientset:               reviews,
			Pods:                    stream.CachedPods{Reader: mgr.GetClient()},
			Kernel:                  sig.Kernel,
			Statuses:                sig.Statuses,
			Usage:                   sig.Usage,
			Leading:                 l.Leading,
			IssueMetricsCertificate: l.issueAgentMetricsCertificate,
			Registerer:              reg,
			Log:                     log,
			Limits:                  cfg.Stream.Limits,
		})
		if err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
	}

	recorder, err := fnc.NewRecorder(fencedConfig, mgr, "kerf-leader", reg)
	if err != nil {
		return nil, err
	}
	rec := &rightsizing.Reconciler{
		Client:          writer,
		Applier:         &apply.Applier{Client: writer, Clientset: fencedCS, Now: cfg.Now},
		RollbackClient:  rollbackWriter,
		Rollbacks:       &apply.Applier{Client: rollbackWriter, Clientset: rollbackCS, Now: cfg.Now},
		Recorder:        recorder,
		Metrics:         l.Metrics,
		Now:             cfg.Now,
		AfterRecord:     cfg.AfterRecord,
		AfterBreach:     cfg.AfterBreach,
		DuringPass:      cfg.DuringPass,
		Kernel:          sig.Kernel,
		Statuses:        sig.Statuses,
		Throttling:      cfg.Throttling,
		Log:             log,
		Workers:         cfg.Workers,
		RollbackWorkers: cfg.RollbackWorkers,
		Gate:            gate,
	}
	if err := rec.SetupWithManager(mgr, sig); err != nil {
		return nil, err
	}
	loop, err := recommender.New(writer, mgr.GetAPIReader(), cfg.WatchNamespaces, sig, cfg.Recommender, cfg.Now, reg, log)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(loop); err != nil {
		return nil, fmt.Errorf("add the recommender: %w", err)
	}
	// Through the controller index: without it, every pass listed each
	// workload's namespace (its pods and ReplicaSets) and matched their
	// labels, half the leader's CPU at 10,000 workloads
	// (docs/performance.md, "The fourth round").
	recs, err := mgr.GetCache().GetInformer(context.Background(), &v1alpha1.RightsizingRecommendation{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("the recommendations' informer: %w", err)
	}
	l.recommendations = cachestore.Recommendations(recs, mgr.GetClient())
	l.usage = pages.NewUsageSeries(workload.Indexed(workload.ReadOnly(mgr.GetClient())), sig, cfg.UsageSeries, cfg.Now, log)
	l.usage.Recommendations = l.recommendations
	if err := mgr.Add(l.usage); err != nil {
		return nil, fmt.Errorf("add the usage series: %w", err)
	}
	if err := warmInformers(mgr.GetCache()); err != nil {
		return nil, err
	}
	if cfg.Hub != nil {
		if err := l.addForwarder(*cfg.Hub); err != nil {
			return nil, err
		}
	} else if err := mgr.Add(forward.NewReleaser(forward.ReleaseConfig{Namespace: cfg.Namespace, Registerer: reg, Log: l.log,
		Recommendations: l.recommendations}, mgr.GetClient(), mgr.GetAPIReader())); err != nil {
		// Without a hub the finalizers a hub-configured leader added go
		// (docs/hub.md, "Turning the hub off").
		return nil, fmt.Errorf("add the hub-delivery finalizer releaser: %w", err)
	}
	return l, nil
}

// leaderReads lists every kind the leader reads through its cache. The
// controllers start only on election, and an informer the cache has not
// been asked for yet starts on the first read, with a LIST of the whole
// kind: a standby that took over would spend its first reconciles waiting
// for those. Asked for at New, they run on every replica from the start,
// so a standby takes over with them synced.
func leaderReads() []client.Object {
	return []client.Object{
		&v1alpha1.RightsizingRecommendation{}, &v1alpha1.RightsizingPolicy{}, &v1alpha1.ClusterRightsizingPolicy{},
		&corev1.Pod{}, &corev1.Namespace{},
		&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{},
		&autoscalingv2.HorizontalPodAutoscaler{},
	}
}

// warmInformers asks c, before it starts, for an informer of every kind
// in leaderReads, so they start and sync with the cache (the replica is
// Ready only then).
func warmInformers(c cache.Cache) error {
	for _, obj := range leaderReads() {
		if _, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	return nil
}

// Leading reports whether this replica leads: it holds the Lease and is
// not stopping. A stopping replica stops leading at once, before it
// releases the Lease, so that its stream acknowledges nothing its stopped
// controllers would no longer act on: the agents keep those events and
// send them to the next leader.
func (l *Leader) Leading() bool {
	if l.stopping.Load() {
		return false
	}
	if _, held := l.fence.Held(); !held {
		return false // a renew too old: frozen, or about to lose the Lease
	}
	select {
	case <-l.mgr.Elected():
		return true
	default:
		return false
	}
}

// Manager is the replica's controller-runtime manager.
func (l *Leader) Manager() manager.Manager { return l.mgr }

// Registry is the replica's metrics registry.
func (l *Leader) Registry() *prometheus.Registry { return l.registry }

// UsageSeries is the usage series the replica's workload pages chart.
func (l *Leader) UsageSeries() *pages.UsageSeries { return l.usage }

// Run runs the replica until ctx is done (nil) or the Lease is lost
// (ErrLeadershipLost): then it has stopped acting and the caller must exit.
// When ctx is done (SIGTERM) the replica stops leading at once (Leading),
// closes the agents' streams and removes its pod's label; its controllers
// then stop, within ShutdownTimeout, and it releases the Lease before Run
// returns, so that the standby takes over at its next retry.
func (l *Leader) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.serveEndpoints(ctx); err != nil {
		return err
	}
	if err := l.serveWebhook(ctx); err != nil {
		return err
	}
	stopStream, err := l.serveStream(ctx)
	if err != nil {
		return err
	}
	defer stopStream()
	if l.cfg.PodName != "" {
		if err := l.unmarkOwnPod(ctx); err != nil {
			return err
		}
	}
	// A graceful stop (SIGTERM) hands over at once, while the manager
	// stops the controllers and then releases the Lease: the replica stops
	// leading, closes the agents' streams (they reconnect through the
	// Service, to the next leader) and removes its pod's label (the
	// Service stops selecting it).
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		if l.Leading() {
			l.log.Info("stopping: no longer leading; the Lease is released once the controllers stop",
				"identity", l.cfg.Identity, "lease", l.cfg.Namespace+"/"+l.cfg.LeaseName, "shutdownTimeout", ShutdownTimeout)
		}
		l.stopping.Store(true)
		stopStream()
		if l.cfg.PodName != "" {
			// Best effort: the next leader clears a label left behind.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := l.unmarkOwnPod(ctx); err != nil {
				l.log.Warn("remove the leader's label on stop; the next leader clears it", "err", err)
			}
		}
	}()
	defer func() { cancel(); <-stopped }()
	go func() {
		if l.mgr.GetCache().WaitForCacheSync(ctx) {
			l.synced.Store(true)
		}
	}()
	go func() {
		select {
		case <-l.mgr.Elected():
			l.log.Info("leading", "identity", l.cfg.Identity, "lease", l.cfg.Namespace+"/"+l.cfg.LeaseName)
			if l.cfg.PodName != "" {
				l.markLeaderPod(ctx)
			}
		case <-ctx.Done():
		}
	}()
	err = l.mgr.Start(ctx)
	if err != nil && err.Error() == ErrLeadershipLost.Error() {
		return ErrLeadershipLost
	}
	return err
}
