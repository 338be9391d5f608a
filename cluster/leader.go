package cluster

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/authn"
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
	// stopping is set as soon as Run's context is done. From then on the
	// replica no longer leads. The manager still renews the Lease until
	// its controllers have stopped, and then releases it.
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
//
// It builds the parts in the order they depend on each other:
//   - the election: the Lease, the fence, the manager;
//   - the clients that write through the fence;
//   - the agents' stream;
//   - the parts the manager runs: the reconciler, the recommender, the
//     pages' usage series and the hub forwarder;
//   - the savings metrics, read from the cache at each scrape.
func New(cfg Config, restConfig *rest.Config, log *slog.Logger) (*Leader, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	l := &Leader{cfg: cfg, restConfig: restConfig, log: log, registry: reg}
	c, err := l.newElection()
	if err != nil {
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l.Metrics = rightsizing.NewMetrics(reg)
	if l.authn, err = authn.New(authn.Config{REST: restConfig, OwnAudience: authn.Audience}); err != nil {
		return nil, fmt.Errorf("endpoints' authentication: %w", err)
	}
	if err := l.newWriters(c); err != nil {
		return nil, err
	}
	sig := cfg.Signals
	if sig == nil {
		sig = signals.New()
	}
	if err := l.newStream(sig); err != nil {
		return nil, err
	}
	if err := l.addReconciler(c, sig); err != nil {
		return nil, err
	}
	if err := l.addRecommender(sig); err != nil {
		return nil, err
	}
	if err := l.addUsageSeries(sig); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	reg.MustRegister(newSavingsCollector(l.recommendations, l.Leading, now, log))
	if err := warmInformers(l.mgr.GetCache()); err != nil {
		return nil, err
	}
	if err := l.addHub(); err != nil {
		return nil, err
	}
	return l, nil
}

// newStream builds the agents' stream when Config.Stream has a listener;
// it feeds sig.
func (l *Leader) newStream(sig *signals.Stores) error {
	cfg := l.cfg
	if cfg.Stream.Listener == nil {
		return nil
	}
	// The agents' TokenReviews and their pods' reads have a budget of
	// their own (agentReviewQPS). It is sized for a connect storm, not
	// the --kube-api-qps every other client has (docs/leader.md, "The
	// clients' budgets"). The handshakes in flight are bounded anyway
	// (--stream-max-handshakes).
	reviewConfig := rest.CopyConfig(l.restConfig)
	reviewConfig.QPS = agentReviewQPS
	reviewConfig.Burst = cmp.Or(cfg.Stream.Limits.MaxHandshakes, stream.DefaultMaxHandshakes)
	reviews, err := kubernetes.NewForConfig(reviewConfig)
	if err != nil {
		return fmt.Errorf("stream: TokenReviews' client: %w", err)
	}
	if err := cfg.Stream.Cert.Validate(); err != nil {
		return fmt.Errorf("stream: a listener without a certificate (agents send their tokens on it): %w", err)
	}
	l.stream, err = stream.New(stream.Config{
		Audience:                cfg.Stream.Audience,
		ServiceAccountNamespace: cfg.Stream.ServiceAccountNamespace,
		ServiceAccountName:      cfg.Stream.ServiceAccountName,
		Clientset:               reviews,
		Pods:                    stream.CachedPods{Reader: l.mgr.GetClient()},
		Kernel:                  sig.Kernel,
		Statuses:                sig.Statuses,
		Usage:                   sig.Usage,
		Leading:                 l.Leading,
		IssueMetricsCertificate: l.issueAgentMetricsCertificate,
		Registerer:              l.registry,
		Log:                     l.log,
		Limits:                  cfg.Stream.Limits,
	})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	return nil
}

// addReconciler adds the RightsizingRecommendation controller
// (cluster/rightsizing): its applies write through the fenced clients,
// its rollbacks through the rollbacks' own.
func (l *Leader) addReconciler(c *clients, sig *signals.Stores) error {
	cfg := l.cfg
	recorder, err := l.fence.NewRecorder(c.fenced, l.mgr, "kerf-leader", l.registry)
	if err != nil {
		return err
	}
	rec := &rightsizing.Reconciler{
		Client:          l.writer,
		Applier:         &apply.Applier{Client: l.writer, Clientset: c.fencedClientset, Now: cfg.Now},
		RollbackClient:  l.rollbackWriter,
		Rollbacks:       &apply.Applier{Client: l.rollbackWriter, Clientset: c.rollbackClientset, Now: cfg.Now},
		Recorder:        recorder,
		Metrics:         l.Metrics,
		Now:             cfg.Now,
		AfterRecord:     cfg.AfterRecord,
		AfterBreach:     cfg.AfterBreach,
		DuringPass:      cfg.DuringPass,
		Kernel:          sig.Kernel,
		Statuses:        sig.Statuses,
		Throttling:      cfg.Throttling,
		Log:             l.log,
		Workers:         cfg.Workers,
		RollbackWorkers: cfg.RollbackWorkers,
		Gate:            c.gate,
		Gates:           gates.Default(l.mgr.GetClient(), cfg.Gates, l.log),
	}
	return rec.SetupWithManager(l.mgr, sig)
}

// addRecommender adds the recommender's loop (cluster/recommender), which
// writes through the fenced client.
func (l *Leader) addRecommender(sig *signals.Stores) error {
	cfg := l.cfg
	loop, err := recommender.New(l.writer, l.mgr.GetAPIReader(), cfg.WatchNamespaces, sig, cfg.Recommender, cfg.Now, l.registry, l.log)
	if err != nil {
		return err
	}
	if err := l.mgr.Add(loop); err != nil {
		return fmt.Errorf("add the recommender: %w", err)
	}
	return nil
}

// addUsageSeries adds the usage series the workload pages chart
// (cluster/pages). The series and the hub's periodic passes read every
// recommendation from the cache's own objects.
func (l *Leader) addUsageSeries(sig *signals.Stores) error {
	recs, err := l.mgr.GetCache().GetInformer(context.Background(), &v1alpha1.RightsizingRecommendation{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("the recommendations' informer: %w", err)
	}
	l.recommendations = cachestore.Recommendations(recs, l.mgr.GetClient())
	// The series reads a workload's pods and ReplicaSets through the
	// controller index (workload.Indexed), not by listing its namespace:
	// docs/performance.md, "The fourth round", has the cost of the list.
	l.usage = pages.NewUsageSeries(workload.ReadOnly(workload.Indexed(l.mgr.GetClient())), sig, l.cfg.UsageSeries, l.cfg.Now, l.log)
	l.usage.Recommendations = l.recommendations
	if err := l.mgr.Add(l.usage); err != nil {
		return fmt.Errorf("add the usage series: %w", err)
	}
	return nil
}

// addHub adds the hub forwarder when Config.Hub is set. Without a hub, it
// adds the releaser that removes the hub-delivery finalizers a
// hub-configured leader added (docs/hub.md, "Turning the hub off").
func (l *Leader) addHub() error {
	if l.cfg.Hub != nil {
		return l.addForwarder(*l.cfg.Hub)
	}
	if err := l.mgr.Add(forward.NewReleaser(forward.ReleaseConfig{Namespace: l.cfg.Namespace, Registerer: l.registry, Log: l.log,
		Recommendations: l.recommendations}, l.mgr.GetClient(), l.mgr.GetAPIReader())); err != nil {
		return fmt.Errorf("add the hub-delivery finalizer releaser: %w", err)
	}
	return nil
}

// leaderReads lists every kind the leader reads through its cache. The
// controllers start only on election. An informer the cache has not been
// asked for yet starts on the first read, with a LIST of the whole kind,
// so a standby that took over would spend its first reconciles waiting.
// Asked for at New, they run on every replica from the start, and a
// standby takes over with them synced.
func leaderReads() []client.Object {
	return []client.Object{
		&v1alpha1.RightsizingRecommendation{}, &v1alpha1.RightsizingPolicy{}, &v1alpha1.ClusterRightsizingPolicy{},
		&v1alpha1.RollbackPolicy{}, &v1alpha1.ClusterRollbackPolicy{},
		&corev1.Pod{}, &corev1.Namespace{},
		&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{},
		&autoscalingv2.HorizontalPodAutoscaler{},
		// The gates' (cluster/gates): limit ranges, quotas, budgets, nodes.
		&corev1.LimitRange{}, &corev1.ResourceQuota{}, &policyv1.PodDisruptionBudget{}, &corev1.Node{},
	}
}

// warmInformers asks c, before it starts, for an informer of every kind
// in leaderReads. They start and sync with the cache, and the replica is
// Ready only then.
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
// releases the Lease. So its stream acknowledges nothing its stopped
// controllers would no longer act on; the agents keep those events and
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
// (ErrLeadershipLost). Then it has stopped acting and the caller must exit.
//
// When ctx is done (SIGTERM), the replica hands over:
//   - it stops leading at once (Leading), closes the agents' streams and
//     removes its pod's label;
//   - its controllers stop, within ShutdownTimeout;
//   - it releases the Lease before Run returns, so that the standby takes
//     over at its next retry.
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
	// stops the controllers and then releases the Lease. The replica stops
	// leading and closes the agents' streams, which reconnect through the
	// Service to the next leader. It removes its pod's label, so the
	// Service stops selecting it.
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
