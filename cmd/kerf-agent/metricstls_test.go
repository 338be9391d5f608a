package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheAgentServesOnlyACertificateForItsKey: the agent serves a
// self-signed certificate until the leader's arrives, then the leader's;
// one for another key (a leader's mistake, or a message not meant for it)
// is ignored and the last stays.
func TestTheAgentServesOnlyACertificateForItsKey(t *testing.T) {
	m, err := newMetricsCert("node-1", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	first, _ := m.GetCertificate(nil)
	require.NotNil(t, first)
	self, err := x509.ParseCertificate(first.Certificate[0])
	require.NoError(t, err)
	assert.Equal(t, self.Subject.String(), self.Issuer.String(), "self-signed until the leader signs one")
	csr, err := x509.ParseCertificateRequest(m.csr)
	require.NoError(t, err)
	require.NoError(t, csr.CheckSignature())

	issue := func(pub any) []byte {
		caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kerf-agent:node-1"},
			DNSNames: []string{"kerf-agent.kerf-system.svc"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, caKey)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	m.issued(issue(other.Public()))
	got, _ := m.GetCertificate(nil)
	assert.Same(t, first, got, "a certificate for another key is not served")
	m.issued([]byte("not PEM"))
	got, _ = m.GetCertificate(nil)
	assert.Same(t, first, got, "an unreadable certificate is not served")

	m.issued(issue(csr.PublicKey))
	got, _ = m.GetCertificate(nil)
	require.NotNil(t, got.Leaf)
	assert.Equal(t, []string{"kerf-agent.kerf-system.svc"}, got.Leaf.DNSNames, "the leader's certificate is served")
}
