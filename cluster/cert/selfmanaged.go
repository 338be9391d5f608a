package cert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SelfManaged serves the Secret-backed certificate of EnsureSelfManaged
// and keeps it fresh. Run renews it before it expires. Run also keeps the
// webhook configuration's caBundle and the CA ConfigMap equal to the
// Secret's CA bundle. Issue signs certificates with the Secret's CA.
type SelfManaged struct {
	c    client.Client
	opts Options
	log  *slog.Logger

	cert atomic.Pointer[tls.Certificate]
	ca   atomic.Pointer[[]byte]
	// issuer is the Secret's current CA with its key (Issue).
	issuer atomic.Pointer[authority]
	// published is whether the last patch (caBundle, CA ConfigMap)
	// succeeded.
	published atomic.Bool
}

// NewSelfManaged ensures the certificate (see EnsureSelfManaged) and
// publishes its CA bundle. It patches the caBundle of
// opts.WebhookConfiguration and the ConfigMap opts.CAConfigMap, each when
// set. A failed patch is logged, not returned. The webhook fails open, and
// clients of the ConfigMap wait, until Run patches it.
func NewSelfManaged(ctx context.Context, c client.Client, opts Options, log *slog.Logger) (*SelfManaged, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &SelfManaged{c: c, opts: opts, log: log.With("component", "cert")}
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	if err := s.patch(ctx); err != nil {
		s.log.Warn("CA bundle not published; clients cannot verify the certificate until it is",
			"webhookConfiguration", opts.WebhookConfiguration, "caConfigMap", opts.CAConfigMap, "err", err)
	}
	return s, nil
}

func (s *SelfManaged) ensure(ctx context.Context) error {
	b, err := ensureSelfManaged(ctx, s.c, s.opts)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(b.certPEM, b.keyPEM)
	if err != nil {
		return fmt.Errorf("load self-managed certificate: %w", err)
	}
	if old := s.cert.Load(); old == nil || !bytes.Equal(old.Certificate[0], pair.Certificate[0]) {
		s.log.Info("serving certificate loaded", "secret", s.opts.Namespace+"/"+s.opts.SecretName,
			"notAfter", pair.Leaf.NotAfter, "hosts", s.opts.Hosts())
	}
	s.cert.Store(&pair)
	s.ca.Store(&b.caPEM)
	// The serving certificate verified against this CA (checkBundle), so
	// both parse; a failure here leaves Issue refusing.
	cas, err := parseCerts(b.caPEM)
	if err != nil || len(cas) == 0 {
		return fmt.Errorf("load self-managed CA: %v", err)
	}
	key, err := parseKey(b.caKeyPEM)
	if err != nil {
		return fmt.Errorf("load self-managed CA key: %w", err)
	}
	s.issuer.Store(&authority{cert: cas[0], key: key})
	return nil
}

// Issue signs a serving certificate for pub with the CA whose bundle the
// SelfManaged publishes, and returns it in PEM. The certificate is valid
// for validity from now, cut at the CA's expiry, and for the DNS names
// hosts. Clients that trust the bundle, the agents and the scrapers, trust
// it.
func (s *SelfManaged) Issue(pub crypto.PublicKey, commonName string, hosts []string, validity time.Duration) ([]byte, error) {
	ca := s.issuer.Load()
	if ca == nil {
		return nil, errors.New("no CA loaded yet")
	}
	now := time.Now()
	if s.opts.Now != nil {
		now = s.opts.Now()
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		DNSNames:              hosts,
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", commonName, err)
	}
	return pemCert(der), nil
}

func (s *SelfManaged) patch(ctx context.Context) error {
	var err error
	if s.opts.WebhookConfiguration != "" {
		err = PatchCABundle(ctx, s.c, s.opts.WebhookConfiguration, s.CABundle())
	}
	if s.opts.CAConfigMap != "" {
		err = errors.Join(err, PublishCA(ctx, s.c, s.opts.Namespace, s.opts.CAConfigMap, s.CABundle()))
	}
	s.published.Store(err == nil)
	return err
}

// CABundle returns the CA bundle in PEM that verifies the serving
// certificate.
func (s *SelfManaged) CABundle() []byte {
	if p := s.ca.Load(); p != nil {
		return *p
	}
	return nil
}

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate.
func (s *SelfManaged) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// Run re-ensures the certificate, the caBundle and the CA ConfigMap every
// interval until ctx ends, retrying sooner (from 5s, doubling) after a
// failure. Each replica runs it; the Secret keeps them agreeing.
func (s *SelfManaged) Run(ctx context.Context, interval time.Duration) {
	const firstRetry = 5 * time.Second
	wait := interval
	if !s.published.Load() || s.opts.WebhookConfiguration != "" && !bytes.Equal(s.currentCABundle(ctx), s.CABundle()) {
		wait = firstRetry
	}
	retry := firstRetry
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := s.ensure(ctx)
		if err == nil {
			err = s.patch(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("refresh self-managed certificate", "err", err, "retryIn", retry)
			wait, retry = retry, min(2*retry, interval)
			continue
		}
		wait, retry = interval, firstRetry
	}
}

// currentCABundle reads the configuration's first caBundle, nil when it
// cannot.
func (s *SelfManaged) currentCABundle(ctx context.Context) []byte {
	cfg, err := getConfiguration(ctx, s.c, s.opts.WebhookConfiguration)
	if err != nil || len(cfg.Webhooks) == 0 {
		return nil
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}
