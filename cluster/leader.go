package cluster

import (
	"cmp"
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/cluster/cachestore"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/cluster/workload"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/internal/kube"
	webui "github.com/kerf-dev/kerf/web"
)

// ErrLeadershipLost is returned by Run when the leader's Lease was lost:
// the process must exit so that it never acts beside the new leader.
var ErrLeadershipLost = errors.New("leader election lost")

// agentReviewQPS is the rate limit of the agents' TokenReviews' client
// (its burst: the handshakes allowed at once): 1,000 streams reopened
// together are authenticated in about 5 s.
const agentReviewQPS = 200

// Config configures a leader replica.
type Config struct {
	// Namespace holds the Lease (the namespace Kerf runs in).
	Namespace string
	// LeaseName is the coordination.k8s.io Lease the replicas compete for.
	LeaseName string
	// Identity names this replica in the Lease (its pod name).
	Identity string
	// PodName, when set, is this replica's pod in Namespace: while leading
	// it carries the label LeaderPodLabel, which the kerf-leader Service
	// selects so the agents' streams reach the leader.
	PodName string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero
	// means 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Listener serves /metrics, /healthz and /readyz (ready once the
	// replica's caches are synced: it serves the webhook and can take over),
	// the audit API and the web pages. Every route but the probes wants a
	// bearer token the apiserver knows (docs/security.md). Nil serves
	// nothing.
	Listener net.Listener
	// ListenerCert, when set, serves Listener over TLS with this
	// certificate (kerf-leader uses the stream's: one name, one CA for
	// the agents and the scrapers); nil serves plain HTTP.
	ListenerCert *cert.Source
	// WatchNamespaces, when set, limits the leader to recommendations,
	// policies and workloads in these namespaces; empty means all.
	WatchNamespaces []string
	// Registry, when set, is the registry the replica's metrics go to (so
	// parts built before it, such as a PromQL source, share it); nil means
	// a new one.
	Registry *prometheus.Registry
	// Signals are the stores of what the agents report (OOM kills, CFS
	// counters, container events): the stream writes them and the health
	// watch reads them, evaluating a pod's watch as soon as one signals it.
	// Nil means signals.New().
	Signals *signals.Stores
	// Throttling gives CFS counters (nil: throttling not evaluated): a
	// PromQL source, or Signals.Kernel when the agents' counters are the
	// throttling input (health.cadvisorFallback, docs/design.md section 3).
	Throttling healthwatch.ThrottlingSource
	// Stream, when its Listener is set, serves the agents' stream on the
	// leader, feeding Signals.
	Stream StreamConfig
	// Webhook, when its Listener is set, serves the mutating admission
	// webhook on every replica (leading or not).
	Webhook WebhookConfig
	// Hub, when set, forwards every recorded action to kerf-hub
	// (cluster/forward, docs/hub.md): only the elected leader runs it,
	// beside the reconciler. Its Namespace, Identity, Registerer, Now and
	// Log default to the replica's. Nil forwards nothing, and removes the
	// hub-delivery finalizer from the recommendations (forward.Releaser).
	Hub *forward.Config
	// Recommender tunes the recommender loop the elected leader runs for
	// the workloads whose policy enables spec.recommend
	// (docs/recommender.md).
	Recommender recommender.Config
	// UsageSeries bounds the usage series the workload pages chart
	// (docs/web.md).
	UsageSeries pages.UsageSeriesConfig
	// Workers is how many recommendations the leader reconciles at once
	// (the controller's MaxConcurrentReconciles); 0 means DefaultWorkers.
	Workers int
	// RollbackWorkers is how many more workers are kept for the harm
	// signals' requests (an OOM kill, a container restart or termination),
	// on a controller of their own that runs nothing else, so that a
	// rollback never waits for an apply pass to finish (but one of its
	// own recommendation). 0 means DefaultRollbackWorkers;
	// NoRollbackWorkers keeps none (the harm requests then go first in the
	// one queue, at harmPriority).
	RollbackWorkers int
	// RollbackQPS and RollbackBurst are the rate limit of the rollbacks'
	// own client (a breach's status, the restore, and the Lease reads
	// that fence them), which no other write uses: a wave of applies
	// never spends it (docs/leader.md, "The clients and their budgets").
	// Zero means DefaultRollbackQPS and DefaultRollbackBurst.
	RollbackQPS   float32
	RollbackBurst int
	// ApplyYield is the longest one write of the applies waits while a
	// pass rolls back (fence.RollbackGate); 0 means DefaultApplyYield,
	// NoApplyYield none.
	ApplyYield time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AfterRecord and AfterBreach are passed to the reconciler (tests only).
	AfterRecord, AfterBreach func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
	// DuringPass is passed to the reconciler (tests only).
	DuringPass func(req ctrl.Request, reserved bool) (done func())
}

// StreamConfig configures the agents' stream, which only the leader serves
// (docs/design.md section 6).
type StreamConfig struct {
	// Listener serves gRPC over TLS; nil serves no stream.
	Listener net.Listener
	// Cert is where the stream's certificate comes from (required with
	// Listener: the agents send their tokens on it).
	Cert cert.Source
	// Audience is the audience the agents' tokens must carry.
	Audience string
	// ServiceAccountNamespace and ServiceAccountName name the agents'
	// service account.
	ServiceAccountNamespace, ServiceAccountName string
	// Limits bound the stream (zero fields: stream's defaults).
	Limits stream.Limits
}

// WebhookConfig configures the admission webhook every replica serves.
type WebhookConfig struct {
	// Listener serves HTTPS; nil serves no webhook.
	Listener net.Listener
	// Cert is where the webhook's certificate comes from; a self-managed
	// one keeps the caBundle of its Options.WebhookConfiguration current.
	Cert cert.Source
	// ClientAuth authenticates the webhook's callers (the apiserver's
	// client certificate); the zero value refuses to serve.
	ClientAuth webhook.ClientAuth
}

// Leader is one kerf-leader replica. Every replica runs; the one that holds
// the Lease applies and rolls back.
type Leader struct {
	cfg        Config
	restConfig *rest.Config
	log        *slog.Logger
	mgr        manager.Manager
	registry   *prometheus.Registry
	// Metrics are the replica's metrics, on its own registry.
	Metrics *Metrics
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

// The rollbacks' client budget by default (Config.RollbackQPS and
// RollbackBurst): the burst holds a 100-replica in-place restore (a resize
// per pod) at once; rollbacks are rare, so the budget is idle nearly
// always.
const (
	DefaultRollbackQPS   = 25
	DefaultRollbackBurst = 100
)

// DefaultApplyYield is the longest one write of the applies waits for
// the rollbacks in progress (fence.RollbackGate, Config.ApplyYield): a
// rollback pass takes 0.2 to 0.6 s at 10,000 workloads
// (docs/performance.md), and a storm of rollbacks must slow the applies,
// not stop them.
const DefaultApplyYield = time.Second

// NoApplyYield as Config.ApplyYield turns the yield off: the applies'
// writes never wait for rollbacks.
const NoApplyYield time.Duration = -1

// ShutdownTimeout bounds how long a stopping replica waits for its
// controllers before it releases the Lease anyway. It stays well below the
// pod's terminationGracePeriodSeconds (manifests/leader.yaml, checked by
// the manifests' tests), so that the release always happens before the
// kubelet's SIGKILL: a replica killed before its release costs the standby
// a whole LeaseDuration.
const ShutdownTimeout = 10 * time.Second

// New builds a leader replica for the cluster restConfig reaches.
func New(cfg Config, restConfig *rest.Config, log *slog.Logger) (*Leader, error) {
	if cfg.Namespace == "" || cfg.LeaseName == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("leader config: namespace (%q), lease name (%q) and identity (%q) must be set", cfg.Namespace, cfg.LeaseName, cfg.Identity)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("leader config: workers (%d) must be at least 1, or 0 for %d", cfg.Workers, DefaultWorkers)
	}
	if cfg.RollbackWorkers < NoRollbackWorkers {
		return nil, fmt.Errorf("leader config: rollback workers (%d) must be at least 1, 0 for the default (%d), or NoRollbackWorkers (%d) for none",
			cfg.RollbackWorkers, DefaultRollbackWorkers, NoRollbackWorkers)
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
	l := &Leader{cfg: cfg, restConfig: restConfig, log: log, mgr: mgr, registry: reg, Metrics: NewMetrics(reg), fence: fnc}
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
	rec := &RecommendationReconciler{
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
		gate:            gate,
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

// Run runs the replica until ctx is done (nil) or the Lease is lost
// (ErrLeadershipLost): then it has stopped acting and the caller must exit.
// When ctx is done (SIGTERM) the replica stops leading at once (Leading),
// closes the agents' streams and removes its pod's label; its controllers
// then stop, within ShutdownTimeout, and it releases the Lease before Run
// returns, so that the standby takes over at its next retry.
func (l *Leader) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopStream func()
	if l.cfg.Listener != nil {
		// Every route but the probes asks the caller's token
		// (docs/security.md): /metrics a get on the URL, the audit API
		// and the pages the namespaces it may list recommendations in.
		opts := []endpoints.Option{endpoints.MetricsAuthorizedBy(l.authn)}
		if l.cfg.ListenerCert != nil {
			tlsConfig, _, err := l.serverTLS(ctx, "endpoints", *l.cfg.ListenerCert)
			if err != nil {
				return err
			}
			opts = append(opts, endpoints.ServeTLS(tlsConfig))
		}
		srv := endpoints.New(prometheus.Gatherers{l.registry}, l.synced.Load, opts...)
		auditAPI := audit.New(l.mgr.GetCache())
		auditAPI.Authorizer = l.authn
		api := http.NewServeMux()
		auditAPI.Register(api)
		srv.Mux().Handle("/v1/", l.authn.Authenticated(api, audit.WriteRefusal))
		activity := &webui.Activity{Source: auditAPI, Refresh: 30 * time.Second}
		srv.Mux().Handle("GET /ui/activity", l.authn.Authenticated(auditAPI.AuthorizeNamespace(activity,
			func(r *http.Request) string { return r.URL.Query().Get("namespace") }), nil))
		workloads := &webui.WorkloadPage{
			Source:  &pages.WorkloadViews{Reader: l.mgr.GetCache(), Series: l.usage, Now: l.cfg.Now},
			Refresh: 30 * time.Second, ActivityHref: "../../activity", Log: l.log,
		}
		srv.Mux().Handle("GET /ui/workloads/{namespace}/{name}", l.authn.Authenticated(auditAPI.AuthorizeNamespace(workloads,
			func(r *http.Request) string { return r.PathValue("namespace") }), nil))
		go func() {
			if err := srv.ServeListener(ctx, l.cfg.Listener); err != nil {
				l.log.Error("endpoints stopped", "err", err)
			}
		}()
	}
	if l.cfg.Webhook.Listener != nil {
		tlsConfig, _, err := l.serverTLS(ctx, "webhook", l.cfg.Webhook.Cert)
		if err != nil {
			return err
		}
		if tlsConfig, err = l.cfg.Webhook.ClientAuth.ServerTLS(tlsConfig, l.log.With("server", "webhook")); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		in := webhook.NewInjector(l.mgr.GetCache(), l.registry, l.log)
		in.Synced = l.synced.Load
		in.LiveReader = l.mgr.GetAPIReader()
		go func() {
			if err := webhook.ServeListener(ctx, l.cfg.Webhook.Listener, tlsConfig, webhook.Mux(in)); err != nil {
				l.log.Error("webhook stopped", "err", err)
			}
		}()
	}
	if l.stream != nil {
		tlsConfig, sm, err := l.serverTLS(ctx, "stream", l.cfg.Stream.Cert)
		if err != nil {
			return err
		}
		if sm != nil {
			l.streamIssuer.Store(sm)
		}
		gs := stream.NewGRPCServer(l.stream, tlsConfig)
		go func() {
			if err := gs.Serve(l.cfg.Stream.Listener); err != nil {
				l.log.Error("stream stopped", "err", err)
			}
		}()
		defer gs.Stop()
		stopStream = gs.Stop
	}
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
		if stopStream != nil {
			stopStream()
		}
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
	err := l.mgr.Start(ctx)
	if err != nil && err.Error() == ErrLeadershipLost.Error() {
		return ErrLeadershipLost
	}
	return err
}

// serverTLS resolves the certificate source of one of the replica's
// servers (the webhook, the stream, the endpoints), the same way for all:
// the user's files, or a self-managed certificate shared by every replica
// through a Secret, which it also returns.
func (l *Leader) serverTLS(ctx context.Context, server string, src cert.Source) (*tls.Config, *cert.SelfManaged, error) {
	// One certificate source serves every server that names it (the
	// stream's serves the endpoints too): one Secret, one renewal loop.
	key := src.Dir + "\x00" + src.SelfManaged.Namespace + "/" + src.SelfManaged.SecretName
	if r, ok := l.serverTLSBySource[key]; ok {
		return r.config, r.selfManaged, nil
	}
	var c client.Client
	if src.Dir == "" {
		// The manager's client reads from a cache that is not started yet.
		var err error
		if c, err = client.New(l.restConfig, client.Options{Scheme: kube.Scheme}); err != nil {
			return nil, nil, fmt.Errorf("%s certificate client: %w", server, err)
		}
	}
	tlsConfig, sm, err := src.Resolve(ctx, c, l.log.With("server", server))
	if err != nil {
		return nil, nil, fmt.Errorf("%s certificate: %w", server, err)
	}
	if l.serverTLSBySource == nil {
		l.serverTLSBySource = make(map[string]resolvedCert)
	}
	l.serverTLSBySource[key] = resolvedCert{tlsConfig, sm}
	return tlsConfig, sm, nil
}

// resolvedCert is a certificate source Run resolved: its servers' TLS
// configuration, and its SelfManaged certificate (nil for the user's
// files).
type resolvedCert struct {
	config      *tls.Config
	selfManaged *cert.SelfManaged
}

// AgentMetricsCertificateValidity is how long an agent's /metrics
// certificate is valid. Every stream brings a new one (at least every
// stream.DefaultMaxStreamAge), so a day covers a leader away for most of
// one, and a key taken from a node serves an impostor for a day at most.
const AgentMetricsCertificateValidity = 24 * time.Hour

// issueAgentMetricsCertificate signs an agent's /metrics certificate with
// the stream's CA, for the name scrapers check
// (kerf-agent.<namespace>.svc), naming the node the agent's token proved.
func (l *Leader) issueAgentMetricsCertificate(pub crypto.PublicKey, node string) ([]byte, error) {
	sm := l.streamIssuer.Load()
	if sm == nil {
		return nil, errors.New("the stream's certificate is not self-managed (--stream-cert-dir): Kerf holds no CA key to sign the agents' with")
	}
	name := l.cfg.Stream.ServiceAccountName + "." + l.cfg.Stream.ServiceAccountNamespace + ".svc"
	return sm.Issue(pub, l.cfg.Stream.ServiceAccountName+":"+node, []string{name}, AgentMetricsCertificateValidity)
}

// addForwarder adds the hub forwarder, a Runnable only the elected leader
// runs, with the replica's namespace, identity, metrics, clock and log.
func (l *Leader) addForwarder(hc forward.Config) error {
	if hc.Namespace == "" {
		hc.Namespace = l.cfg.Namespace
	}
	if hc.Identity == "" {
		hc.Identity = l.cfg.Identity
	}
	if hc.Registerer == nil {
		hc.Registerer = l.registry
	}
	if hc.AgentsConnected == nil && l.stream != nil {
		hc.AgentsConnected = forward.GaugeReader(l.registry, "kerf_stream_connected_agents")
	}
	if hc.Now == nil {
		hc.Now = l.cfg.Now
	}
	if hc.Log == nil {
		hc.Log = l.log
	}
	if hc.Recommendations == nil {
		hc.Recommendations = l.recommendations
	}
	fw, err := forward.New(hc, l.writer, l.mgr.GetAPIReader())
	if err != nil {
		return fmt.Errorf("hub forwarder: %w", err)
	}
	if err := l.mgr.Add(fw); err != nil {
		return fmt.Errorf("add the hub forwarder: %w", err)
	}
	return nil
}
