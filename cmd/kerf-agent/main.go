// Command kerf-agent is Kerf's node agent (a DaemonSet): it reads each
// container's CFS throttling counters and OOM kills from the kernel, exports
// them as Prometheus metrics and streams them to kerf-leader.
// See docs/ and docs/design.md section 5.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/node"
	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/node/stream"
)

// defaultGCPercent is the agent's GOGC unless the environment sets one. The
// agent's live heap is a few MiB and most of what it allocates lives for
// one sample or one scrape, so collecting at half the default growth keeps
// about 3.5 MiB less resident for about 0.05 % of a core more
// (docs/agent.md, Budget).
const defaultGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	fs := flag.NewFlagSet("kerf-agent", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-addr", ":9400", "address of the /metrics, /healthz and /readyz endpoints")
	metricsTLS := fs.Bool("metrics-tls", false, "serve --metrics-addr over HTTPS with a certificate the leader signs over the stream (for kerf-agent.<namespace>.svc, CA in the leader's kerf-leader-ca; self-signed until the first arrives): callers send bearer tokens (docs/security.md)")
	oomSource := fs.String("oom-source", oom.KindAuto, "where OOM kills come from: "+strings.Join(oom.Kinds, ", ")+" (auto: the best the node allows)")
	interval := fs.Duration("interval", time.Second, "how often every container's cpu.stat is sampled")
	usageInterval := fs.Duration("usage-interval", node.DefaultUsageInterval, "how often every container's usage (CPU, working set, memory peak) is read in full; the passes between read its memory usage alone, for the peak")
	cgroupRoot := fs.String("cgroup-root", "", "cgroup path of the kubelet's pods, e.g. /kubepods (default: found)")
	cgroupDriver := fs.String("cgroup-driver", string(cgroup.DriverCgroupfs), "the kubelet's cgroup driver: cgroupfs or systemd")
	kubeletRoot := fs.String("kubelet-cgroup-root", "/", "the kubelet's --cgroup-root")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name: the apiserver discovery watches its pods, the stream reports it (required with --leader-addr or --discovery=apiserver)")
	leaderAddr := fs.String("leader-addr", "", "the leader's stream address, host:port (empty: no stream)")
	leaderCA := fs.String("leader-ca", "", "CA certificate file that signed the leader's stream certificate; read again on each connect")
	leaderServerName := fs.String("leader-server-name", "", "name the leader's stream certificate is verified against (default: the host of --leader-addr), e.g. kerf-leader.kerf-system.svc when dialling the Service's IP")
	tokenFile := fs.String("token-file", "/var/run/secrets/kerf/token", "projected service-account token (audience: the leader's) sent on the stream")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the apiserver pod discovery and the reviews of /metrics' callers (default: in-cluster configuration)")
	discovery := fs.String("discovery", node.DiscoveryAuto, "where the node's pods come from: "+strings.Join(node.DiscoveryModes, ", ")+
		" (auto: the kubelet's Pods API when its socket answers, else an apiserver informer on --node-name's pods)")
	podsAPISocket := fs.String("pods-api-socket", node.DefaultPodsAPISocket, "the kubelet's Pods API socket (<kubelet --root-dir>/pods-api/pods-api.sock)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kerf-agent [flags]\n\n"+
			"Kerf's node agent: reads CFS throttling counters and OOM kills per container\n"+
			"from the kernel, exports them as metrics and streams them to kerf-leader.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log.Info("kerf-agent starting", "metricsAddr", *metricsAddr)
	driver := cgroup.Driver(*cgroupDriver)
	if driver != cgroup.DriverCgroupfs && driver != cgroup.DriverSystemd {
		log.Error("kerf-agent cannot start", "err", fmt.Sprintf("--cgroup-driver %q: must be cgroupfs or systemd", *cgroupDriver))
		os.Exit(2)
	}
	if *interval <= 0 {
		log.Error("kerf-agent cannot start", "err", fmt.Sprintf("--interval %s: must be positive", *interval))
		os.Exit(2)
	}
	if *usageInterval <= 0 {
		log.Error("kerf-agent cannot start", "err", fmt.Sprintf("--usage-interval %s: must be positive", *usageInterval))
		os.Exit(2)
	}
	agent, err := node.New(node.Config{OOMSource: *oomSource, CgroupRoot: *cgroupRoot, Interval: *interval, UsageInterval: *usageInterval,
		Discovery: *discovery, PodsAPISocket: *podsAPISocket, NodeName: *nodeName,
		Layout: cgroup.Layout{Driver: driver, Root: *kubeletRoot},
		Kube:   func() (*rest.Config, error) { return restConfig(*kubeconfig) }}, log, reg)
	if err != nil {
		log.Error("kerf-agent cannot start", "err", err)
		os.Exit(1)
	}
	var metricsCert *metricsCert
	if *metricsTLS {
		if *leaderAddr == "" {
			log.Error("kerf-agent cannot start", "err", "--metrics-tls needs --leader-addr: the leader signs the certificate")
			os.Exit(2)
		}
		if metricsCert, err = newMetricsCert(*nodeName, log); err != nil {
			log.Error("kerf-agent cannot start", "err", err)
			os.Exit(1)
		}
	}
	if *leaderAddr != "" {
		tlsConfig, err := leaderTLS(*leaderCA)
		if err != nil {
			log.Error("kerf-agent cannot start", "err", err)
			os.Exit(2)
		}
		tlsConfig.ServerName = *leaderServerName
		sc := stream.Config{Addr: *leaderAddr, TLS: tlsConfig, CAFile: *leaderCA, TokenFile: *tokenFile,
			NodeName: *nodeName, OOMSource: agent.OOMSource(), Registerer: reg, Log: log}
		if metricsCert != nil {
			sc.MetricsCSR, sc.OnMetricsCertificate = metricsCert.csr, metricsCert.issued
		}
		client, err := stream.NewClient(sc)
		if err != nil {
			log.Error("kerf-agent cannot start", "err", err)
			os.Exit(2)
		}
		agent.SetStream(client)
	}
	// /metrics asks the caller's token (TokenReview, then a
	// SubjectAccessReview for get /metrics) of the apiserver, as the
	// agent itself: docs/security.md.
	kc, err := restConfig(*kubeconfig)
	if err != nil {
		log.Error("kerf-agent cannot start", "err", fmt.Errorf("/metrics authenticates its callers with the apiserver: %w", err))
		os.Exit(2)
	}
	metricsAuth, err := authn.New(authn.Config{REST: kc, OwnAudience: authn.Audience})
	if err != nil {
		log.Error("kerf-agent cannot start", "err", err)
		os.Exit(2)
	}
	errc := make(chan error, 2)
	go func() { errc <- agent.Run(ctx) }()
	go func() {
		opts := []endpoints.Option{endpoints.Uncompressed(), endpoints.MetricsAuthorizedBy(metricsAuth)}
		if metricsCert != nil {
			opts = append(opts, endpoints.ServeTLS(metricsCert.tlsConfig()))
		}
		// Not ready while the agent cannot read the node's containers
		// (node.CheckLayout): the pod shows it, on its node.
		errc <- endpoints.New(reg, agent.Ready, opts...).Serve(ctx, *metricsAddr)
	}()
	for range 2 {
		if err := <-errc; err != nil {
			log.Error("kerf-agent stopped", "err", err)
			os.Exit(1)
		}
	}
	log.Info("kerf-agent stopped")
}

// restConfig reads kubeconfig, or the in-cluster configuration when empty.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return cfg, nil
}

// leaderTLS trusts the CA in caFile (the system roots when empty).
func leaderTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--leader-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--leader-ca %s: no PEM certificate in it", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
