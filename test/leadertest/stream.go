package leadertest

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/signals"
	"github.com/kerf-dev/kerf/cluster/stream"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// Options say whom the stream accepts and where samples go.
type Options struct {
	// Audience is the audience the agents' tokens must carry.
	Audience string
	// Namespace and ServiceAccount name the agents' service account.
	Namespace, ServiceAccount string
	// Kernel receives the samples and OOM kills (nil: a new one).
	Kernel *signals.Kernel
	// Usage receives the usage readings (nil: a new one).
	Usage *signals.Usage
	// Log receives the server's log (nil: discarded).
	Log io.Writer
	// IssueMetricsCertificates makes the stream answer an agent's
	// metrics_csr as the leader does (cluster.Leader's
	// issueAgentMetricsCertificate): a certificate for
	// <ServiceAccount>.<Namespace>.svc signed by cert.SelfManaged's CA.
	// The Namespace must exist: the CA's Secret is made there.
	IssueMetricsCertificates bool
}

// metricsSecret is the Secret of the CA that signs the agents' /metrics
// certificates, named as kerf-leader's --stream-secret default.
const metricsSecret = "kerf-leader-cert"

// metricsValidity is how long an agent's /metrics certificate is valid, as
// cluster.AgentMetricsCertificateValidity.
const metricsValidity = 24 * time.Hour

// Stream is a running leader stream.
type Stream struct {
	// Addr is its host:port.
	Addr string
	// Pool trusts its certificate; CAFile holds the same as PEM (for
	// kerf-agent --leader-ca).
	Pool   *x509.CertPool
	CAFile string
	// Kernel is where what the agents send lands, their usage readings
	// in Usage.
	Kernel *signals.Kernel
	Usage  *signals.Usage
	// MetricsPool trusts the agents' /metrics certificates it issued,
	// for MetricsServerName (kerf-agent.<namespace>.svc); nil unless
	// Options.IssueMetricsCertificates.
	MetricsPool       *x509.CertPool
	MetricsServerName string
}

// Pods is a synced pod cache of cp, indexed and read as the leader reads
// its own (stream.IndexPodsByUID, stream.CachedPods), until the test
// ends.
func Pods(t testing.TB, cp *controlplane.ControlPlane) stream.Pods {
	t.Helper()
	c, err := cache.New(cp.Config, cache.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	require.NoError(t, stream.IndexPodsByUID(t.Context(), c))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.True(t, c.WaitForCacheSync(t.Context()), "the pod cache never synced")
	return stream.CachedPods{Reader: c}
}

// Start serves the stream of cp's cluster until the test ends.
func Start(t testing.TB, cp *controlplane.ControlPlane, opts Options) *Stream {
	t.Helper()
	cs := cp.Clientset
	pods := Pods(t, cp)
	if opts.Kernel == nil {
		opts.Kernel = signals.NewKernel()
	}
	if opts.Usage == nil {
		opts.Usage = signals.NewUsage(0)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	var leading atomic.Bool
	leading.Store(true)
	log := slog.New(slog.NewTextHandler(opts.Log, nil))
	st := &Stream{Kernel: opts.Kernel, Usage: opts.Usage}
	var issue func(crypto.PublicKey, string) ([]byte, error)
	if opts.IssueMetricsCertificates {
		issue, st.MetricsPool, st.MetricsServerName = metricsIssuer(t, cp, opts, log)
	}
	srv, err := stream.New(stream.Config{
		Audience:                opts.Audience,
		ServiceAccountNamespace: opts.Namespace,
		ServiceAccountName:      opts.ServiceAccount,
		Clientset:               cs,
		Pods:                    pods,
		Kernel:                  opts.Kernel,
		Usage:                   opts.Usage,
		Leading:                 leading.Load,
		IssueMetricsCertificate: issue,
		Registerer:              prometheus.NewRegistry(),
		Log:                     log,
	})
	require.NoError(t, err)
	serverTLS, pool := streamtest.SelfSigned(t)
	caFile := filepath.Join(t.TempDir(), "leader-ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serverTLS.Certificates[0].Certificate[0]}), 0o600))
	g := stream.NewGRPCServer(srv, serverTLS)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	st.Addr, st.Pool, st.CAFile = lis.Addr().String(), pool, caFile
	return st
}

// metricsIssuer returns what signs the agents' /metrics certificates as
// the leader does, the pool that verifies them and the name they are for.
// The CA is cert.SelfManaged's, in a Secret of opts.Namespace.
func metricsIssuer(t testing.TB, cp *controlplane.ControlPlane, opts Options, log *slog.Logger) (func(crypto.PublicKey, string) ([]byte, error), *x509.CertPool, string) {
	t.Helper()
	c, err := client.New(cp.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	sm, err := cert.NewSelfManaged(t.Context(), c, cert.Options{Namespace: opts.Namespace, ServiceName: "kerf-leader", SecretName: metricsSecret}, log)
	require.NoError(t, err, "the CA of the agents' /metrics certificates")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(sm.CABundle()), "the self-managed CA bundle holds no certificate")
	name := opts.ServiceAccount + "." + opts.Namespace + ".svc"
	issue := func(pub crypto.PublicKey, node string) ([]byte, error) {
		return sm.Issue(pub, opts.ServiceAccount+":"+node, []string{name}, metricsValidity)
	}
	return issue, pool, name
}
