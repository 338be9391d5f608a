package stream

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/node/oom"
	"github.com/kerf-dev/kerf/test/streamtest"
)

// certPEM is the PEM of a server TLS config's certificate (self-signed:
// its own CA).
func certPEM(cfg *tls.Config) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cfg.Certificates[0].Certificate[0]})
}

// TestCredentialsAreReadAgainOnEachConnect: the agent's token file and
// its trusted CA file (--leader-ca) are read on each connect, so a token
// the kubelet rotated and a CA rotated in its Secret are used from the
// next connection on, without restarting the agent.
func TestCredentialsAreReadAgainOnEachConnect(t *testing.T) {
	f := newLeaderFixture(t)
	l := f.start(t, "127.0.0.1:0")
	good, err := os.ReadFile(f.tokenFile)
	require.NoError(t, err)
	other, _ := streamtest.SelfSigned(t)
	// run runs a client trusting caFile with the token of tokenFile.
	run := func(t *testing.T, caFile, tokenFile string) *Client {
		c, err := NewClient(Config{
			Addr: l.addr, TLS: &tls.Config{MinVersion: tls.VersionTLS13}, CAFile: caFile, TokenFile: tokenFile,
			NodeName: "node-a", OOMSource: oom.KindCgroup, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Registerer: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(streamtest.LogWriter(t), nil)),
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return c
	}
	// The agent's state says connected once its Hello went out; the
	// leader's gauge counts the streams it accepted. The subtests wait on
	// the gauge: a client's state can say connected before the leader
	// has counted it, and the next subtest would then see the previous
	// client's stream arrive.
	accepted := func() bool { return l.gauge(t, "kerf_stream_connected_agents") == 1 }

	t.Run("CAFile", func(t *testing.T) {
		dir := t.TempDir()
		caFile, tokenFile := filepath.Join(dir, "leader-ca.pem"), filepath.Join(dir, "token")
		require.NoError(t, os.WriteFile(tokenFile, good, 0o600))
		// At first the CA file holds another leader's certificate.
		require.NoError(t, os.WriteFile(caFile, certPEM(other), 0o600))
		c := run(t, caFile, tokenFile)
		assert.Never(t, func() bool { return c.State() == Connected }, time.Second, tick, "a leader the CA does not sign is not trusted")
		// The CA is rotated to the leader's: the next connection trusts it.
		require.NoError(t, os.WriteFile(caFile, certPEM(f.serverTLS), 0o600))
		assert.Eventually(t, func() bool { return c.State() == Connected }, eventually, tick, "the new CA is used")
		assert.Eventually(t, accepted, eventually, tick, "the leader accepts the stream")
	})
	t.Run("TokenFile", func(t *testing.T) {
		dir := t.TempDir()
		caFile, tokenFile := filepath.Join(dir, "leader-ca.pem"), filepath.Join(dir, "token")
		require.NoError(t, os.WriteFile(caFile, certPEM(f.serverTLS), 0o600))
		require.NoError(t, os.WriteFile(tokenFile, []byte("not-a-token"), 0o600))
		require.Eventually(t, func() bool { return !accepted() }, eventually, tick, "the CAFile client is gone")
		run(t, caFile, tokenFile)
		assert.Never(t, accepted, time.Second, tick, "a bad token is refused")
		// The kubelet rotates the token: the next connection sends it.
		require.NoError(t, os.WriteFile(tokenFile, good, 0o600))
		assert.Eventually(t, accepted, eventually, tick, "the rewritten token is used")
	})
}
