package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThePairServesItsHostsAndIsItsOwnCA: the PEM pair loads as a TLS key
// pair, and a client that trusts only CertPEM verifies it for each name
// and address, over a real TLS handshake too.
func TestThePairServesItsHostsAndIsItsOwnCA(t *testing.T) {
	p, err := New("kerf-hub", []string{"kerf-hub.kerf-hub.svc", "127.0.0.1", "::1"}, 24*time.Hour)
	require.NoError(t, err)
	loaded, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	require.NoError(t, err, "CertPEM and KeyPEM are one pair")
	assert.Equal(t, p.TLS.Certificate, loaded.Certificate)

	leaf := p.TLS.Leaf
	require.NotNil(t, leaf)
	assert.Equal(t, "kerf-hub", leaf.Subject.CommonName)
	assert.Equal(t, []string{"kerf-hub.kerf-hub.svc"}, leaf.DNSNames)
	assert.Len(t, leaf.IPAddresses, 2)
	assert.True(t, leaf.IsCA)
	assert.WithinDuration(t, time.Now().Add(24*time.Hour), leaf.NotAfter, time.Minute)
	assert.True(t, leaf.NotBefore.Before(time.Now().Add(-59*time.Minute)), "valid from an hour ago: clocks differ")

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CertPEM))
	for _, h := range []string{"kerf-hub.kerf-hub.svc", "127.0.0.1", "::1"} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: h})
		assert.NoError(t, err, h)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.svc"})
	assert.Error(t, err, "a name it is not for")

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{loaded}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "a client trusting CertPEM completes the handshake")
	_ = c.Close()
}
