package stream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"log/slog"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
)

// metricsCertificate answers a Hello's metrics_csr: a certificate for its
// public key (an ECDSA P-256 key, as the agent makes), issued by
// Config.IssueMetricsCertificate for node.
//   - A request that closes the stream is past streamv1.MaxCSRBytes,
//     unreadable, not self-signed by its key, or for another kind of key.
//   - A certificate the leader cannot sign is logged and counted, and the
//     stream goes on without one.
func (s *Server) metricsCertificate(node string, csrDER []byte, log *slog.Logger) (*streamv1.LeaderMessage, error) {
	if len(csrDER) > streamv1.MaxCSRBytes {
		return nil, malformed("metrics_csr_too_large", "hello.metrics_csr is %d bytes, over %d", len(csrDER), streamv1.MaxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, malformed("metrics_csr_invalid", "hello.metrics_csr: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, malformed("metrics_csr_invalid", "hello.metrics_csr is not signed by its key: %v", err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, malformed("metrics_csr_invalid", "hello.metrics_csr: the key must be ECDSA P-256, not %T", csr.PublicKey)
	}
	if s.cfg.IssueMetricsCertificate == nil {
		s.metrics.certificates.WithLabelValues("failed").Inc()
		log.Warn("the agent asked for a /metrics certificate; this leader issues none")
		return nil, nil
	}
	certPEM, err := s.cfg.IssueMetricsCertificate(pub, node)
	if err != nil {
		s.metrics.certificates.WithLabelValues("failed").Inc()
		log.Warn("cannot issue the agent's /metrics certificate; it keeps serving its last", "err", err)
		return nil, nil
	}
	s.metrics.certificates.WithLabelValues("issued").Inc()
	return &streamv1.LeaderMessage{Body: &streamv1.LeaderMessage_MetricsCertificate{
		MetricsCertificate: &streamv1.MetricsCertificate{CertificatePem: certPEM}}}, nil
}
