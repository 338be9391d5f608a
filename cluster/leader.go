package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/apply"
	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/watch"
	"github.com/kerf-dev/kerf/cluster/webhook"
	"github.com/kerf-dev/kerf/internal/endpoints"
)

// ErrLeadershipLost is returned by Run when the leader's Lease was lost:
// the process must exit so that it never acts beside the new leader.
var ErrLeadershipLost = errors.New("leader election lost")

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
	// replica's caches are synced: it serves the webhook and can take over).
	// Nil serves nothing.
	Listener net.Listener
	// WatchNamespaces, when set, limits the leader to recommendations,
	// policies and workloads in these namespaces; empty means all.
	WatchNamespaces []string
	// Registry, when set, is the registry the replica's metrics go to (so
	// parts built before it, such as a PromQL source, share it); nil means
	// a new one.
	Registry *prometheus.Registry
	// Kernel gives OOM kill counts from the agents (nil: pod status only).
	Kernel watch.KernelSource
	// Statuses gives the container restarts and terminations the agents
	// saw in the kubelet's Pods API before pod status (nil: pod status
	// only).
	Statuses watch.AgentStatusSource
	// Throttling gives CFS counters (nil: throttling not evaluated).
	Throttling watch.ThrottlingSource
	// Stream, when its Listener is set, serves the agents' stream on the
	// leader; the agents' counters, OOM kills and container events then
	// feed the watch (Kernel, Statuses and Throttling, when nil, become the
	// stream's source).
	Stream StreamConfig
	// Webhook, when its Listener is set, serves the mutating admission
	// webhook on every replica (leading or not).
	Webhook WebhookConfig
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AfterRecord and AfterBreach are passed to the reconciler (tests only).
	AfterRecord, AfterBreach func(ctx context.Context, rsr *v1alpha1.RightsizingRecommendation)
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
	// CadvisorFallback makes the agents' CFS counters the health watch's
	// throttling input when Config.Throttling is nil (health.cadvisorFallback,
	// off by default: docs/design.md section 3). OOM kills from the agents
	// are used either way.
	CadvisorFallback bool
}

// WebhookConfig configures the admission webhook every replica serves.
type WebhookConfig struct {
	// Listener serves HTTPS; nil serves no webhook.
	Listener net.Listener
	// Cert is where the webhook's certificate comes from; a self-managed
	// one keeps the caBundle of its Options.WebhookConfiguration current.
	Cert cert.Source
}

// Scheme holds the types the leader reads and writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
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
	// synced is set once the caches are synced: the replica is ready.
	synced atomic.Bool
}

// New builds a leader replica for the cluster restConfig reaches.
func New(cfg Config, restConfig *rest.Config, log *slog.Logger) (*Leader, error) {
	if cfg.Namespace == "" || cfg.LeaseName == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("leader config: namespace (%q), lease name (%q) and identity (%q) must be set", cfg.Namespace, cfg.LeaseName, cfg.Identity)
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
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
		Client:     leaseClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	var cacheOpts cache.Options
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Cache:                               cacheOpts,
		Scheme:                              Scheme,
		Logger:                              logr.FromSlogHandler(log.Handler()),
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:              "0",
		LeaderElection:                      true,
		LeaderElectionID:                    cfg.LeaseName,
		LeaderElectionNamespace:             cfg.Namespace,
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &cfg.LeaseDuration,
		RenewDeadline:                       &cfg.RenewDeadline,
		RetryPeriod:                         &cfg.RetryPeriod,
	})
	if err != nil {
		return nil, fmt.Errorf("build manager: %w", err)
	}
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l := &Leader{cfg: cfg, restConfig: restConfig, log: log, mgr: mgr, registry: reg, Metrics: NewMetrics(reg)}

	var streamSrv *stream.Server
	if cfg.Stream.Listener != nil {
		if err := cfg.Stream.Cert.Validate(); err != nil {
			return nil, fmt.Errorf("stream: a listener without a certificate (agents send their tokens on it): %w", err)
		}
		mem := watch.NewMemorySource(watch.WithCompaction(watch.DefaultRecent))
		if cfg.Kernel == nil {
			cfg.Kernel = mem
		}
		if cfg.Throttling == nil && cfg.Stream.CadvisorFallback {
			cfg.Throttling = mem
		}
		statuses := watch.NewAgentStatuses(0)
		if cfg.Statuses == nil {
			cfg.Statuses = statuses
		}
		streamSrv, err = stream.New(stream.Config{
			Audience:                cfg.Stream.Audience,
			ServiceAccountNamespace: cfg.Stream.ServiceAccountNamespace,
			ServiceAccountName:      cfg.Stream.ServiceAccountName,
			Clientset:               cs,
			Pods:                    cachedPods{mgr.GetClient()},
			Memory:                  mem,
			Statuses:                statuses,
			Leading:                 l.Leading,
			Registerer:              reg,
			Log:                     log,
		})
		if err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
		l.stream = streamSrv
	}
	l.cfg = cfg

	rec := &RecommendationReconciler{
		Client:      mgr.GetClient(),
		Applier:     &apply.Applier{Client: mgr.GetClient(), Clientset: cs, Now: cfg.Now},
		Recorder:    mgr.GetEventRecorder("kerf-leader"),
		Metrics:     l.Metrics,
		Now:         cfg.Now,
		AfterRecord: cfg.AfterRecord,
		AfterBreach: cfg.AfterBreach,
		Kernel:      cfg.Kernel,
		Statuses:    cfg.Statuses,
		Throttling:  cfg.Throttling,
		Log:         log,
	}
	// A policy change can change what every recommendation in its scope
	// may do.
	inScope := func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.RightsizingRecommendationList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			log.Error("list recommendations for a policy change", "err", err)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, r := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&r)})
		}
		return reqs
	}
	allInScope := handler.EnqueueRequestsFromMapFunc(inScope)
	bld := ctrl.NewControllerManagedBy(mgr)
	// An agent's signal (an OOM kill, a container event, new counters)
	// about a pod is acted on
	// as soon as it arrives, like a pod status update.
	signals := signalSources(cfg.Kernel, cfg.Statuses, cfg.Throttling)
	if len(signals) > 0 || streamSrv != nil {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podUIDIndex, func(o client.Object) []string {
			return []string{string(o.GetUID())}
		}); err != nil {
			return nil, fmt.Errorf("index pods by UID: %w", err)
		}
	}
	if len(signals) > 0 {
		ch := make(chan event.GenericEvent, 4096)
		for _, s := range signals {
			s.OnSignal(func(sig watch.Signal) {
				select {
				case ch <- event.GenericEvent{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: sig.PodUID}}}:
				default: // full: the watch's periodic look catches up
				}
			})
		}
		bld = bld.WatchesRawSource(source.Channel(ch, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var pods corev1.PodList
			if err := mgr.GetClient().List(ctx, &pods, client.MatchingFields{podUIDIndex: string(o.GetUID())}); err != nil || len(pods.Items) == 0 {
				return nil
			}
			return inScope(ctx, &pods.Items[0])
		})))
	}
	err = bld.
		For(&v1alpha1.RightsizingRecommendation{}).
		Watches(&v1alpha1.RightsizingPolicy{}, allInScope).
		Watches(&v1alpha1.ClusterRightsizingPolicy{}, allInScope).
		// A pod status update is a health signal: act on it at once.
		Watches(&corev1.Pod{}, allInScope).
		// Replicas in one process (tests) each build this controller.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(rec)
	if err != nil {
		return nil, fmt.Errorf("build recommendation controller: %w", err)
	}
	return l, nil
}

// Leading reports whether this replica holds the Lease.
func (l *Leader) Leading() bool {
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
func (l *Leader) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if l.cfg.Listener != nil {
		srv := endpoints.New(prometheus.Gatherers{l.registry}, l.synced.Load)
		audit.New(l.mgr.GetCache()).Register(srv.Mux())
		go func() {
			if err := srv.ServeListener(ctx, l.cfg.Listener); err != nil {
				l.log.Error("endpoints stopped", "err", err)
			}
		}()
	}
	if l.cfg.Webhook.Listener != nil {
		tlsConfig, err := l.serverTLS(ctx, "webhook", l.cfg.Webhook.Cert)
		if err != nil {
			return err
		}
		in := webhook.NewInjector(l.mgr.GetCache(), l.registry, l.log)
		in.LiveReader = l.mgr.GetAPIReader()
		go func() {
			if err := webhook.ServeListener(ctx, l.cfg.Webhook.Listener, tlsConfig, webhook.Mux(in)); err != nil {
				l.log.Error("webhook stopped", "err", err)
			}
		}()
	}
	if l.stream != nil {
		tlsConfig, err := l.serverTLS(ctx, "stream", l.cfg.Stream.Cert)
		if err != nil {
			return err
		}
		gs := stream.NewGRPCServer(l.stream, tlsConfig)
		go func() {
			if err := gs.Serve(l.cfg.Stream.Listener); err != nil {
				l.log.Error("stream stopped", "err", err)
			}
		}()
		defer gs.Stop()
	}
	if l.cfg.PodName != "" {
		if err := l.unmarkOwnPod(ctx); err != nil {
			return err
		}
		defer func() {
			// Best effort: a leader that stops leaves the label to the
			// next one to clear, and is not Ready meanwhile.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = l.unmarkOwnPod(ctx)
		}()
	}
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
// servers (the webhook, the stream), the same way for both: the user's
// files, or a self-managed certificate shared by every replica through a
// Secret.
func (l *Leader) serverTLS(ctx context.Context, server string, src cert.Source) (*tls.Config, error) {
	var c client.Client
	if src.Dir == "" {
		// The manager's client reads from a cache that is not started yet.
		var err error
		if c, err = client.New(l.restConfig, client.Options{Scheme: Scheme}); err != nil {
			return nil, fmt.Errorf("%s certificate client: %w", server, err)
		}
	}
	tlsConfig, err := src.TLS(ctx, c, l.log.With("server", server))
	if err != nil {
		return nil, fmt.Errorf("%s certificate: %w", server, err)
	}
	return tlsConfig, nil
}

// podUIDIndex indexes cached pods by UID, to find the pod an agent's signal
// is about.
const podUIDIndex = "metadata.uid"

// signaler is a signal source that tells when it has news about a pod.
type signaler interface {
	OnSignal(func(watch.Signal)) (cancel func())
}

// signalSources returns the distinct sources among srcs that signal.
func signalSources(srcs ...any) []signaler {
	var out []signaler
	for _, s := range srcs {
		sg, ok := s.(signaler)
		if !ok || slices.ContainsFunc(out, func(o signaler) bool { return o == sg }) {
			continue
		}
		out = append(out, sg)
	}
	return out
}

// cachedPods finds pods by UID in the leader's cache.
type cachedPods struct{ c client.Reader }

// PodByUID returns the cached pod with the UID.
func (p cachedPods) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := p.c.List(ctx, &pods, client.MatchingFields{podUIDIndex: string(uid)}); err != nil || len(pods.Items) == 0 {
		return nil, false
	}
	return &pods.Items[0], true
}
