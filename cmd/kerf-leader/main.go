// Command kerf-leader is Kerf's cluster-level leader (a Deployment with one
// elected replica): it applies rightsizing recommendations, runs the health
// watch over the workloads they touch and rolls harmful changes back.
// See docs/ and docs/design.md sections 2-4.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // freeze windows name IANA time zones; the image has no zoneinfo

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/fence"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/cluster/promql"
	"github.com/kerf-dev/kerf/cluster/recommender"
	"github.com/kerf-dev/kerf/cluster/rightsizing"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/cluster/webhook"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("kerf-leader", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-addr", ":9401", "address of the /metrics, /healthz and /readyz endpoints, and of the audit API")
	metricsTLS := fs.Bool("metrics-tls", false, "serve --metrics-addr over HTTPS with the stream's certificate (--stream-cert-dir, or the self-managed one for --stream-service, its CA in --stream-ca-configmap): callers send bearer tokens (docs/security.md)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	qps := fs.Float64("kube-api-qps", defaultQPS, "requests per second the leader's Kubernetes clients may make, each (client-go's default, 5, held a 25,000-workload cluster to 2 applies/s: docs/performance.md)")
	burst := fs.Int("kube-api-burst", defaultBurst, "burst of --kube-api-qps")
	rollbackQPS := fs.Float64("rollback-api-qps", fence.DefaultRollbackQPS, "requests per second of the rollbacks' own Kubernetes client (a breach's status, the restore, the Lease reads that fence them), which no apply spends: docs/leader.md")
	rollbackBurst := fs.Int("rollback-api-burst", fence.DefaultRollbackBurst, "burst of --rollback-api-qps (the default holds a 100-replica in-place restore at once)")
	workers := fs.Int("workers", rightsizing.DefaultWorkers, fmt.Sprintf("recommendations the leader reconciles at once, 1 to %d (never one twice at once; a rollback waits for none of the queued applies, only for a worker: docs/leader.md)", maxWorkers))
	rollbackWorkers := fs.Int("rollback-workers", rightsizing.DefaultRollbackWorkers, fmt.Sprintf("workers kept for the harm signals' requests (OOM kills, container restarts), beside --workers, 0 to %d: a rollback never waits for an apply pass to finish (0: none, they go first in the one queue; docs/leader.md)", maxRollbackWorkers))
	recommenderWorkers := fs.Int("recommender-workers", recommender.DefaultWorkers, fmt.Sprintf("recommendations the recommender writes at once, 1 to %d (its client's --kube-api-qps is the real bound; rollbacks have their own client: docs/recommender.md)", recommender.MaxWorkers))
	applyYield := fs.Duration("apply-yield", fence.DefaultApplyYield, "longest one write of the applies waits while a rollback is being written, so that the rollback meets an apiserver not busy with them (0: never wait; docs/leader.md)")
	namespace := fs.String("namespace", envOr("POD_NAMESPACE", "kerf-system"), "namespace of the leader Lease")
	leaseName := fs.String("lease-name", "kerf-leader", "name of the coordination.k8s.io Lease the replicas compete for")
	identity := fs.String("identity", envOr("POD_NAME", host), "this replica's name in the Lease")
	podName := fs.String("pod-name", os.Getenv("POD_NAME"), "this replica's pod in --namespace, labeled "+cluster.LeaderPodLabel+"=true while it leads (the kerf-leader Service selects it; empty: no label)")
	webhookAddr := fs.String("webhook-addr", ":9443", "HTTPS address of the mutating admission webhook, served by every replica (empty: none)")
	webhookCertDir := fs.String("webhook-cert-dir", "", "directory with tls.crt and tls.key for the webhook (default: a self-managed certificate)")
	webhookService := fs.String("webhook-service", "kerf-webhook", "Service the apiserver calls the webhook through (names the self-managed certificate)")
	webhookSecret := fs.String("webhook-secret", "kerf-webhook-cert", "Secret that holds the self-managed certificate, shared by the replicas")
	webhookClientCA := fs.String("webhook-client-ca", "", "PEM file of the CA the apiserver's client certificate (its admission kubeconfig) must chain to; the webhook refuses callers without one (read again when it changes; docs/install.md)")
	webhookClientNames := fs.String("webhook-client-name", webhook.DefaultClientName, "comma-separated common names accepted on the webhook caller's certificate (empty: any certificate --webhook-client-ca signed)")
	webhookAllowUnauthenticated := fs.Bool("webhook-allow-unauthenticated", false, "serve the webhook without authenticating its callers, where the apiserver cannot be given a client certificate (a forged AdmissionReview then reads any namespace's values)")
	streamAddr := fs.String("stream-addr", "", "gRPC address of the agents' stream, served by the leader (empty: none)")
	streamCertDir := fs.String("stream-cert-dir", "", "directory with tls.crt and tls.key for the stream (default: a self-managed certificate)")
	streamService := fs.String("stream-service", "kerf-leader", "Service the agents reach the stream through (names the self-managed certificate)")
	streamSecret := fs.String("stream-secret", "kerf-leader-cert", "Secret that holds the stream's self-managed certificate, shared by the replicas")
	streamCAConfigMap := fs.String("stream-ca-configmap", "kerf-leader-ca", "ConfigMap where the stream's self-managed CA bundle is published (key ca.crt) for the agents")
	agentAudience := fs.String("agent-audience", "kerf-leader", "audience the agents' service-account tokens must carry")
	agentSA := fs.String("agent-service-account", "kerf-agent", "the agents' service account, in --namespace")
	var limits stream.Limits
	fs.IntVar(&limits.MaxStreams, "stream-max-streams", stream.DefaultMaxStreams, "agents' streams served at once (one per node; a node's newer stream replaces its older)")
	fs.IntVar(&limits.MaxHandshakes, "stream-max-handshakes", stream.DefaultMaxHandshakes, "streams authenticating at once")
	fs.DurationVar(&limits.HandshakeTimeout, "stream-handshake-timeout", stream.DefaultHandshakeTimeout, "time for a connection's TLS handshake, and for a stream's authentication up to its Hello")
	fs.DurationVar(&limits.ReauthEvery, "stream-reauth-every", stream.DefaultReauthEvery, "how often an open stream's token is reviewed again (a revoked token closes it)")
	fs.DurationVar(&limits.MaxStreamAge, "stream-max-age", stream.DefaultMaxStreamAge, "longest life of an agent's connection (gRPC MaxConnectionAge)")
	fs.Float64Var(&limits.ReviewsPerSecond, "stream-reviews-per-second", stream.DefaultReviewsPerSecond, "failed authentications (refused TokenReviews, tokens not an agent's) one source IP may cause per second; past the burst its cache misses are refused (reviews that pass cost nothing)")
	fs.IntVar(&limits.ReviewBurst, "stream-review-burst", stream.DefaultReviewBurst, "burst of --stream-reviews-per-second")
	fs.IntVar(&limits.MaxContainers, "stream-max-containers", stream.DefaultMaxContainers, "containers one node's agent may report at once")
	cadvisorFallback := fs.Bool("cadvisor-fallback", false, "read CPU throttling from the agents' stream when --metrics-url is not set (health.cadvisorFallback)")
	metricsURL := fs.String("metrics-url", "", "Prometheus-compatible URL to read CPU throttling from (health.metricsURL; empty: not from Prometheus)")
	hubURL := fs.String("hub-url", "", "kerf-hub's base URL (https://host:port) to forward every recorded action to (empty: none; docs/hub.md)")
	hubTokenFile := fs.String("hub-token-file", "", "file with this cluster's hub token (kerf-hub clusters add), read again for every batch")
	hubCAFile := fs.String("hub-ca-file", "", "PEM file of the CA (or the self-signed certificate) the hub's certificate must chain to (default: the system's roots)")
	clusterName := fs.String("cluster-name", "", "this cluster's name as registered on the hub")
	protectedNamespaces := fs.String("protected-namespaces", "kube-system", "comma-separated namespaces whose workloads Kerf never changes: a change there is blocked, reason ProtectedNamespace (empty: none; docs/health.md)")
	webhookConfig := fs.String("webhook-config", "kerf", "MutatingWebhookConfiguration whose caBundle the self-managed certificate keeps current")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kerf-leader [flags]\n\n"+
			"Kerf's leader: applies rightsizing recommendations, watches the health of\n"+
			"each change and rolls harmful changes back. Every replica runs; the one\n"+
			"holding the Lease acts, and exits the moment it loses it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	// The agents' signals are kept once: the stream writes them, the health
	// watch reads them.
	cfg := cluster.Config{Namespace: *namespace, LeaseName: *leaseName, Identity: *identity, PodName: *podName,
		Registry: prometheus.NewRegistry(), Signals: signals.New()}
	if *workers < 1 || *workers > maxWorkers {
		log.Error("kerf-leader cannot start", "err", fmt.Sprintf("--workers %d: must be between 1 and %d", *workers, maxWorkers))
		os.Exit(2)
	}
	cfg.Workers = *workers
	rw, err := rollbackWorkersOf(*rollbackWorkers)
	if err != nil {
		log.Error("kerf-leader cannot start", "err", err)
		os.Exit(2)
	}
	cfg.RollbackWorkers = rw
	if cfg.Recommender.Workers, err = recommenderWorkersOf(*recommenderWorkers); err != nil {
		log.Error("kerf-leader cannot start", "err", err)
		os.Exit(2)
	}
	if *rollbackQPS <= 0 || *rollbackBurst <= 0 {
		log.Error("kerf-leader cannot start", "err", fmt.Sprintf("--rollback-api-qps %g and --rollback-api-burst %d: must be positive", *rollbackQPS, *rollbackBurst))
		os.Exit(2)
	}
	cfg.RollbackQPS, cfg.RollbackBurst = float32(*rollbackQPS), *rollbackBurst
	if cfg.ApplyYield, err = applyYieldOf(*applyYield); err != nil {
		log.Error("kerf-leader cannot start", "err", err)
		os.Exit(2)
	}
	if cfg.Gates.ProtectedNamespaces, err = protectedNamespacesOf(*protectedNamespaces); err != nil {
		log.Error("kerf-leader cannot start", "err", err)
		os.Exit(2)
	}
	if *hubURL != "" {
		hc, err := hubConfig(*hubURL, *hubTokenFile, *hubCAFile, *clusterName)
		if err != nil {
			log.Error("--hub-url", "err", err)
			os.Exit(2)
		}
		cfg.Hub = hc
	}
	if *metricsURL != "" {
		src, err := promql.New(promql.Config{URL: *metricsURL}, cfg.Registry)
		if err != nil {
			log.Error("--metrics-url", "err", err)
			os.Exit(2)
		}
		cfg.Throttling = src
	}
	// Every server takes its certificate the same way: the user's
	// directory, or a self-managed one whose CA goes where their clients
	// read it (the webhook's caBundle; for the stream, which is TLS only
	// since agents send their tokens on it, and the endpoints with
	// --metrics-tls, --stream-ca-configmap: docs/install.md).
	cfg.Webhook = cluster.WebhookConfig{Cert: cert.Source{Dir: *webhookCertDir, SelfManaged: cert.Options{
		Namespace: *namespace, ServiceName: *webhookService, SecretName: *webhookSecret, WebhookConfiguration: *webhookConfig}}}
	if *webhookAddr != "" {
		auth := webhook.ClientAuth{CAFile: *webhookClientCA, AllowUnauthenticated: *webhookAllowUnauthenticated}
		// The default name goes with a CA; a name given without one is
		// refused by Validate.
		namesSet := false
		fs.Visit(func(f *flag.Flag) { namesSet = namesSet || f.Name == "webhook-client-name" })
		if *webhookClientCA != "" || namesSet {
			auth.Names = splitNames(*webhookClientNames)
		}
		if err := auth.Validate(); err != nil {
			log.Error("--webhook-addr", "err", err)
			os.Exit(2)
		}
		cfg.Webhook.ClientAuth = auth
	}
	streamCert := cert.Source{Dir: *streamCertDir, SelfManaged: cert.Options{
		Namespace: *namespace, ServiceName: *streamService, SecretName: *streamSecret, CAConfigMap: *streamCAConfigMap}}
	if *metricsTLS {
		cfg.ListenerCert = &streamCert
	}
	if *streamAddr != "" {
		ln, err := net.Listen("tcp", *streamAddr)
		if err != nil {
			log.Error("--stream-addr", "err", err)
			os.Exit(2)
		}
		cfg.Stream = cluster.StreamConfig{Listener: ln,
			Audience: *agentAudience, ServiceAccountNamespace: *namespace, ServiceAccountName: *agentSA, Limits: limits,
			Cert: streamCert}
		// health.cadvisorFallback (off by default, docs/design.md section
		// 3): without a PromQL source, the agents' CFS counters are the
		// throttling input. OOM kills from the agents are used either way.
		if cfg.Throttling == nil && *cadvisorFallback {
			cfg.Throttling = cfg.Signals.Kernel
		}
	}
	if *qps <= 0 || *burst <= 0 {
		log.Error("kerf-leader cannot start", "err", fmt.Sprintf("--kube-api-qps %g and --kube-api-burst %d: must be positive", *qps, *burst))
		os.Exit(2)
	}
	if err := run(log, *kubeconfig, *metricsAddr, *webhookAddr, float32(*qps), *burst, cfg); err != nil {
		log.Error("kerf-leader stopped", "err", err)
		os.Exit(1)
	}
	log.Info("kerf-leader stopped")
}

// The leader's client rate limit by default: client-go's 5 requests/s
// (burst 10) kept a 25,000-workload cluster to about 2 applies/s and its
// agents' TokenReviews waiting (docs/performance.md, "The leader at
// scale"); 50/100 is what a controller of this size asks of an apiserver,
// and the apiserver's own priority and fairness still bounds it.
const (
	defaultQPS   = 50
	defaultBurst = 100
)

// maxWorkers bounds --workers: past it more workers only wait on the
// client's rate limit, each with a reconcile's memory.
const maxWorkers = 256

// maxRollbackWorkers bounds --rollback-workers: they run the harm
// signals' requests only, each a pass of its own recommendation.
const maxRollbackWorkers = 64

// rollbackWorkersOf is Config.RollbackWorkers for --rollback-workers n: n,
// or rightsizing.NoRollbackWorkers for 0.
func rollbackWorkersOf(n int) (int, error) {
	if n < 0 || n > maxRollbackWorkers {
		return 0, fmt.Errorf("--rollback-workers %d: must be between 0 and %d", n, maxRollbackWorkers)
	}
	if n == 0 {
		return rightsizing.NoRollbackWorkers, nil
	}
	return n, nil
}

// recommenderWorkersOf is Config.Recommender.Workers for
// --recommender-workers n, from 1 to recommender.MaxWorkers.
func recommenderWorkersOf(n int) (int, error) {
	if n < 1 || n > recommender.MaxWorkers {
		return 0, fmt.Errorf("--recommender-workers %d: must be between 1 and %d", n, recommender.MaxWorkers)
	}
	return n, nil
}

// protectedNamespacesOf is Config.Gates.ProtectedNamespaces for
// --protected-namespaces v: its names, each a namespace name.
func protectedNamespacesOf(v string) ([]string, error) {
	names := splitNames(v)
	for _, n := range names {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("--protected-namespaces: %q is not a namespace name: %s", n, strings.Join(errs, "; "))
		}
	}
	return names, nil
}

// applyYieldOf is Config.ApplyYield for --apply-yield d: d, or
// fence.NoApplyYield for 0.
func applyYieldOf(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("--apply-yield %s: must not be negative", d)
	case d == 0:
		return fence.NoApplyYield, nil
	}
	return d, nil
}

func run(log *slog.Logger, kubeconfig, metricsAddr, webhookAddr string, qps float32, burst int, cfg cluster.Config) error {
	var restConfig *rest.Config
	var err error
	if kubeconfig != "" {
		restConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		restConfig, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client configuration: %w", err)
	}
	restConfig.QPS, restConfig.Burst = qps, burst
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return fmt.Errorf("listen on --metrics-addr %s: %w", metricsAddr, err)
	}
	cfg.Listener = ln
	if webhookAddr != "" {
		if cfg.Webhook.Listener, err = net.Listen("tcp", webhookAddr); err != nil {
			return fmt.Errorf("listen on --webhook-addr %s: %w", webhookAddr, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	leader, err := cluster.New(cfg, restConfig, log)
	if err != nil {
		return err
	}
	log.Info("kerf-leader starting", "identity", cfg.Identity, "lease", cfg.Namespace+"/"+cfg.LeaseName, "metricsAddr", metricsAddr)
	err = leader.Run(ctx)
	if errors.Is(err, cluster.ErrLeadershipLost) {
		return fmt.Errorf("%w: exiting so that only the new leader acts", err)
	}
	return err
}

// splitNames splits a comma-separated flag value, dropping empty names.
func splitNames(v string) []string {
	var out []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// hubConfig builds the hub forwarder's configuration from the --hub-*
// flags, checking what can be checked before the leader starts.
func hubConfig(hubURL, tokenFile, caFile, clusterName string) (*forward.Config, error) {
	hc := &forward.Config{URL: hubURL, TokenFile: tokenFile, Cluster: clusterName}
	if err := hc.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.ReadFile(tokenFile); err != nil {
		return nil, fmt.Errorf("--hub-token-file: %w", err)
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--hub-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--hub-ca-file %s: no PEM certificate in it", caFile)
		}
		hc.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return hc, nil
}
