package cluster

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/gates"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/webhook"
)

// ErrLeadershipLost is returned by Run when the leader's Lease was lost:
// the process must exit so that it never acts beside the new leader.
var ErrLeadershipLost = errors.New("leader election lost")

// agentReviewQPS is the rate limit of the agents' TokenReviews' client;
// its burst is the handshakes allowed at once. It is sized for the
// streams a failover reopens together (docs/leader.md, "The clients'
// budgets").
const agentReviewQPS = 200

// Config configures a leader replica.
type Config struct {
	// Namespace holds the Lease: the namespace Kerf runs in.
	Namespace string
	// LeaseName is the coordination.k8s.io Lease the replicas compete for.
	LeaseName string
	// Identity names this replica in the Lease: its pod name.
	Identity string
	// PodName, when set, is this replica's pod in Namespace: while leading
	// it carries the label LeaderPodLabel, which the kerf-leader Service
	// selects so the agents' streams reach the leader.
	PodName string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero
	// means 15 s, 10 s and 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Listener serves /metrics, /healthz, /readyz, the audit API and the
	// web pages. /readyz is ready once the replica's caches are synced:
	// it serves the webhook and can take over. Every route but the probes
	// wants a bearer token the apiserver knows (docs/security.md). Nil
	// serves nothing.
	Listener net.Listener
	// ListenerCert, when set, serves Listener over TLS with this
	// certificate; nil serves plain HTTP. kerf-leader uses the stream's:
	// one name, one CA for the agents and the scrapers.
	ListenerCert *cert.Source
	// WatchNamespaces, when set, limits the leader to recommendations,
	// policies and workloads in these namespaces; empty means all.
	WatchNamespaces []string
	// Registry, when set, is the registry the replica's metrics go to, so
	// that parts built before it, such as a PromQL source, share it. Nil
	// means a new one.
	Registry *prometheus.Registry
	// Signals are the stores of what the agents report: OOM kills, CFS
	// counters, container events. The stream writes them and the health
	// watch reads them, evaluating a pod's watch as soon as one signals
	// it. Nil means signals.New().
	Signals *signals.Stores
	// Throttling gives CFS counters; nil leaves throttling not evaluated.
	// It is a PromQL source, or Signals.Kernel when the agents' counters
	// are the throttling input (health.cadvisorFallback, docs/design.md
	// section 3).
	Throttling healthwatch.ThrottlingSource
	// Stream, when its Listener is set, serves the agents' stream on the
	// leader, feeding Signals.
	Stream StreamConfig
	// Webhook, when its Listener is set, serves the mutating admission
	// webhook on every replica, leading or not.
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
	// Gates configure the checks a change must pass before it is applied
	// (cluster/gates).
	Gates gates.Options
	// UsageSeries bounds the usage series the workload pages chart
	// (docs/web.md).
	UsageSeries pages.UsageSeriesConfig
	// Workers is how many recommendations the leader reconciles at once
	// (the controller's MaxConcurrentReconciles); 0 means rightsizing.DefaultWorkers.
	Workers int
	// RollbackWorkers is how many more workers are kept for the harm
	// signals' requests: an OOM kill, a container restart or termination.
	// They run on a controller of their own that runs nothing else. So a
	// rollback never waits for an apply pass to finish, except a pass of
	// its own recommendation. 0 means rightsizing.DefaultRollbackWorkers.
	// rightsizing.NoRollbackWorkers keeps none: the harm requests then go
	// first in the one queue, at harmPriority.
	RollbackWorkers int
	// RollbackQPS and RollbackBurst are the rate limit of the rollbacks'
	// own client: a breach's status, the restore, and the Lease reads
	// that fence them. No other write uses it, so a wave of applies never
	// spends it (docs/leader.md, "The clients and their budgets"). Zero
	// means fence.DefaultRollbackQPS and fence.DefaultRollbackBurst.
	RollbackQPS   float32
	RollbackBurst int
	// ApplyYield is the longest one write of the applies waits while a
	// pass rolls back (fence.RollbackGate); 0 means fence.DefaultApplyYield,
	// fence.NoApplyYield none.
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
	// Cert is where the stream's certificate comes from. It is required
	// with Listener, since the agents send their tokens on it.
	Cert cert.Source
	// Audience is the audience the agents' tokens must carry.
	Audience string
	// ServiceAccountNamespace and ServiceAccountName name the agents'
	// service account.
	ServiceAccountNamespace, ServiceAccountName string
	// Limits bound the stream; zero fields take stream's defaults.
	Limits stream.Limits
}

// WebhookConfig configures the admission webhook every replica serves.
type WebhookConfig struct {
	// Listener serves HTTPS; nil serves no webhook.
	Listener net.Listener
	// Cert is where the webhook's certificate comes from; a self-managed
	// one keeps the caBundle of its Options.WebhookConfiguration current.
	Cert cert.Source
	// ClientAuth authenticates the webhook's callers by the apiserver's
	// client certificate; the zero value refuses to serve.
	ClientAuth webhook.ClientAuth
}

// ShutdownTimeout bounds how long a stopping replica waits for its
// controllers before it releases the Lease anyway. It stays well below the
// pod's terminationGracePeriodSeconds (manifests/leader.yaml, checked by
// the manifests' tests). So the release always happens before the
// kubelet's SIGKILL; a replica killed before its release costs the
// standby a whole LeaseDuration.
const ShutdownTimeout = 10 * time.Second
