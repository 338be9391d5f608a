package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync/atomic"
	"time"
)

// metricsCert is the agent's /metrics serving certificate (--metrics-tls):
// a key made at start, held in memory only, with a certificate request
// the stream sends in each Hello. Until the leader's first certificate
// arrives the agent serves a self-signed one, so the kubelet's probes
// (which do not verify) get TLS and a scraper that verifies refuses it;
// then the newest the leader issued.
type metricsCert struct {
	key  *ecdsa.PrivateKey
	csr  []byte
	cert atomic.Pointer[tls.Certificate]
	log  *slog.Logger
}

func newMetricsCert(node string, log *slog.Logger) (*metricsCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("--metrics-tls: generate key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "kerf-agent:" + node}}, key)
	if err != nil {
		return nil, fmt.Errorf("--metrics-tls: certificate request: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: "kerf-agent:" + node + " (self-signed until the leader signs one)"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("--metrics-tls: self-signed certificate: %w", err)
	}
	m := &metricsCert{key: key, csr: csr, log: log}
	m.cert.Store(&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	return m, nil
}

// GetCertificate is tls.Config.GetCertificate: the newest certificate.
func (m *metricsCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return m.cert.Load(), nil
}

// tlsConfig is the /metrics server's TLS configuration.
func (m *metricsCert) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: m.GetCertificate}
}

// issued serves certPEM, a certificate the leader issued, from now on. One
// that is unreadable or for another key is logged and ignored: the agent
// keeps serving its last.
func (m *metricsCert) issued(certPEM []byte) {
	leaf, err := parseLeaf(certPEM, m.key)
	if err != nil {
		m.log.Warn("the leader's /metrics certificate is not usable; serving the last one", "err", err)
		return
	}
	m.cert.Store(&tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: m.key, Leaf: leaf})
	m.log.Info("serving /metrics with the leader's certificate", "names", leaf.DNSNames, "notAfter", leaf.NotAfter)
}

// parseLeaf reads the first certificate of certPEM and checks it is for
// key.
func parseLeaf(certPEM []byte, key *ecdsa.PrivateKey) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("the certificate is for another key")
	}
	return leaf, nil
}
