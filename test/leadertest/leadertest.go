// Package leadertest serves the leader's side of the agents' stream for
// tests: the real stream server (TLS, TokenReview of the agent's bound
// token against a real apiserver, pods from a controller-runtime cache read
// as the leader reads its own: stream.CachedPods) on a loopback port,
// feeding a signals.Kernel.
package leadertest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/cache"

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
}

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
	srv, err := stream.New(stream.Config{
		Audience:                opts.Audience,
		ServiceAccountNamespace: opts.Namespace,
		ServiceAccountName:      opts.ServiceAccount,
		Clientset:               cs,
		Pods:                    pods,
		Kernel:                  opts.Kernel,
		Usage:                   opts.Usage,
		Leading:                 leading.Load,
		Registerer:              prometheus.NewRegistry(),
		Log:                     slog.New(slog.NewTextHandler(opts.Log, nil)),
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
	return &Stream{Addr: lis.Addr().String(), Pool: pool, CAFile: caFile, Kernel: opts.Kernel, Usage: opts.Usage}
}
