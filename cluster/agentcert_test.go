package cluster_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cluster"
	agentstream "github.com/kerf-dev/kerf/node/stream"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
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
	ns := kubetest.Namespace(t, c)
	s := newAgentStream(t, c, ns)
	l := leadertest.StartReplica(t, ns, "a", cluster.Config{Stream: s.config()})
	require.Eventually(t, l.Leading, 15*time.Second, 50*time.Millisecond)
	runAgent := func(csr []byte, issued func([]byte)) {
		s.run(t, func(cfg *agentstream.Config) { cfg.MetricsCSR, cfg.OnMetricsCertificate = csr, issued })
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
	_, err = leaf.Verify(x509.VerifyOptions{Roots: s.pool, DNSName: "kerf-agent." + ns + ".svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "the stream's CA signed it for the agents' name")
	assert.Equal(t, []string{"kerf-agent." + ns + ".svc"}, leaf.DNSNames, "the names are the leader's, not the request's")
	assert.Equal(t, "kerf-agent:"+s.nodeName, leaf.Subject.CommonName, "it names the node the token proved")
	assert.True(t, leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()), "it is for the agent's key")
	assert.WithinDuration(t, time.Now().Add(cluster.AgentMetricsCertificateValidity), leaf.NotAfter, time.Minute)

	// A request whose signature is not its key's: the leader closes the
	// stream rather than sign a key nobody proved to hold.
	forged := append([]byte(nil), csr...)
	forged[len(forged)-5] ^= 0xff
	runAgent(forged, func([]byte) { t.Error("a forged request got a certificate") })
	require.Eventually(t, func() bool {
		return leadertest.MetricValue(t, l, "kerf_stream_errors_total", "reason", "metrics_csr_invalid") >= 1
	}, 30*time.Second, 50*time.Millisecond, "the forged request closes its stream")
	// The node's two agents replace each other's streams: the good one
	// gets a new certificate on each.
	assert.GreaterOrEqual(t, leadertest.MetricValue(t, l, "kerf_stream_metrics_certificates_total", "result", "issued"), 1.0)
}
