package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentstream "github.com/kerf-dev/kerf/node/stream"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// TestTheLeaderSignsTheAgentsMetricsCertificate: an agent that sends a
// certificate request in its Hello (kerf-agent --metrics-tls) gets a
// certificate for its key, signed by the stream's CA, for
// kerf-agent.<namespace>.svc, naming the node its token proved and valid
// for a day; scrapers verify the agent's /metrics with it. A request that
// is not signed by its key closes the stream. Before, the agents' /metrics
// had no certificate to serve TLS with.
func TestTheLeaderSignsTheAgentsMetricsCertificate(t *testing.T) {
	c := controlplane.Get(t).Client
	cs := controlplane.Get(t).Clientset
	ns := namespace(t, c)
	ctx := context.Background()
	nodeName := node(t, c)
	serverCert, pool := streamCert(t, c, ns)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kerf-agent"}}))
	agentPod := streamtest.CreatePod(t, cs, ns, "kerf-agent-node-1", nodeName, "kerf-agent")
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(streamtest.CreateToken(t, cs, ns, "kerf-agent", "kerf-leader", agentPod)), 0o600))
	l := startLeader(t, ns, "a", Config{Stream: StreamConfig{Listener: lis, Cert: serverCert,
		Audience: "kerf-leader", ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}})
	require.Eventually(t, l.Leading, 15*time.Second, 50*time.Millisecond)

	runAgent := func(csr []byte, issued func([]byte)) {
		agent, err := agentstream.NewClient(agentstream.Config{
			Addr: lis.Addr().String(), TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TokenFile: tokenFile, NodeName: nodeName, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			MetricsCSR: csr, OnMetricsCertificate: issued,
			Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(streamtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = agent.Run(runCtx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "asks-for-another-name"}, DNSNames: []string{"kerf-leader." + ns + ".svc"}}, key)
	require.NoError(t, err)
	certs := make(chan []byte, 4)
	runAgent(csr, func(p []byte) { certs <- p })
	var certPEM []byte
	select {
	case certPEM = <-certs:
	case <-time.After(30 * time.Second):
		t.Fatal("no /metrics certificate from the leader")
	}
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kerf-agent." + ns + ".svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "the stream's CA signed it for the agents' name")
	assert.Equal(t, []string{"kerf-agent." + ns + ".svc"}, leaf.DNSNames, "the names are the leader's, not the request's")
	assert.Equal(t, "kerf-agent:"+nodeName, leaf.Subject.CommonName, "it names the node the token proved")
	assert.True(t, leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()), "it is for the agent's key")
	assert.WithinDuration(t, time.Now().Add(AgentMetricsCertificateValidity), leaf.NotAfter, time.Minute)

	// A request whose signature is not its key's: the leader closes the
	// stream rather than sign a key nobody proved to hold.
	forged := append([]byte(nil), csr...)
	forged[len(forged)-5] ^= 0xff
	runAgent(forged, func([]byte) { t.Error("a forged request got a certificate") })
	require.Eventually(t, func() bool {
		return metricValue(t, l, "kerf_stream_errors_total", "reason", "metrics_csr_invalid") >= 1
	}, 30*time.Second, 50*time.Millisecond, "the forged request closes its stream")
	// The node's two agents replace each other's streams: the good one
	// gets a new certificate on each.
	assert.GreaterOrEqual(t, metricValue(t, l, "kerf_stream_metrics_certificates_total", "result", "issued"), 1.0)
}
