package webhook

import (
	"bytes"
	"context"
	"crypto"
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
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the self-managed certificate's Secret (type kubernetes.io/tls).
const (
	// SecretCAKey holds the CA bundle in PEM: the current CA first, then a
	// previous CA while it is still valid, so that serving certificates of
	// both are trusted during a CA rotation.
	SecretCAKey = "ca.crt"
	// SecretCAPrivateKey holds the current CA's private key in PEM.
	SecretCAPrivateKey = "ca.key"
)

// Defaults of CertOptions.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	DefaultRenewBefore  = 30 * 24 * time.Hour
)

// ensureAttempts bounds how often EnsureSelfManagedCert re-reads the Secret
// after losing a race to another replica.
const ensureAttempts = 5

// CertOptions say where the self-managed certificate lives and whom it
// serves.
type CertOptions struct {
	// Namespace is the namespace of the webhook's Service and of the Secret.
	Namespace string
	// ServiceName is the webhook's Service: the serving certificate is for
	// <service>.<namespace>.svc, the name the apiserver calls.
	ServiceName string
	// SecretName is the Secret that holds the CA and the serving
	// certificate, shared by every replica.
	SecretName string
	// ExtraHosts are further DNS names or IP addresses the serving
	// certificate covers.
	ExtraHosts []string
	// CAConfigMap, when set, names a ConfigMap in Namespace where a
	// SelfManagedCertificate publishes the CA bundle (key ca.crt), for
	// clients other than the apiserver: the agents verify the leader's
	// stream certificate with it.
	CAConfigMap string
	// CAValidity is how long a new CA is valid; zero means DefaultCAValidity.
	CAValidity time.Duration
	// CertValidity is how long a new serving certificate is valid; zero
	// means DefaultCertValidity.
	CertValidity time.Duration
	// RenewBefore is how long before its expiry a certificate (CA or
	// serving) is replaced; zero means DefaultRenewBefore.
	RenewBefore time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (o CertOptions) withDefaults() (CertOptions, error) {
	if o.Namespace == "" || o.ServiceName == "" || o.SecretName == "" {
		return o, fmt.Errorf("certificate options: namespace (%q), serviceName (%q) and secretName (%q) are required",
			o.Namespace, o.ServiceName, o.SecretName)
	}
	if o.CAValidity <= 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity <= 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.RenewBefore <= 0 {
		o.RenewBefore = DefaultRenewBefore
	}
	if o.RenewBefore >= o.CertValidity || o.RenewBefore >= o.CAValidity {
		return o, fmt.Errorf("certificate options: renewBefore %s must be shorter than certValidity %s and caValidity %s",
			o.RenewBefore, o.CertValidity, o.CAValidity)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// Hosts are the names the serving certificate covers: the Service's DNS
// names, then ExtraHosts.
func (o CertOptions) Hosts() []string {
	svc := o.ServiceName + "." + o.Namespace + ".svc"
	return append([]string{svc, svc + ".cluster.local"}, o.ExtraHosts...)
}

// certBundle is the content of the Secret.
type certBundle struct {
	certPEM, keyPEM, caPEM, caKeyPEM []byte
}

// EnsureSelfManagedCert returns the serving certificate, its key and the CA
// bundle kept in the Secret opts names, creating the Secret when it is
// absent and renewing what it holds when it is unreadable, does not cover
// opts' hosts or is within RenewBefore of its expiry. Every replica calls
// it and all end up with the Secret's content: a replica that loses the
// race to create or update the Secret (AlreadyExists, Conflict) reads the
// winner's.
//
// c should read Secrets from the apiserver, not from a cache (a cache would
// watch every Secret of the cluster and could miss the winner's write).
func EnsureSelfManagedCert(ctx context.Context, c client.Client, opts CertOptions) (certPEM, keyPEM, caPEM []byte, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, nil, nil, err
	}
	key := client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}
	for range ensureAttempts {
		var s corev1.Secret
		err := c.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			b, err := newBundle(opts, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			s = corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: key.Namespace, Name: key.Name,
					Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "webhook", "app.kubernetes.io/managed-by": "kerf"},
				},
				Type: corev1.SecretTypeTLS,
				Data: b.data(),
			}
			err = c.Create(ctx, &s)
			if apierrors.IsAlreadyExists(err) {
				continue // another replica created it first: use its
			}
			if err != nil {
				return nil, nil, nil, fmt.Errorf("create Secret %s: %w", key, err)
			}
			return b.certPEM, b.keyPEM, b.caPEM, nil
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("get Secret %s: %w", key, err)
		}

		b, ca, why := checkBundle(s.Data, opts)
		if why == "" {
			return b.certPEM, b.keyPEM, b.caPEM, nil
		}
		nb, err := newBundle(opts, ca)
		if err != nil {
			return nil, nil, nil, err
		}
		s.Type = corev1.SecretTypeTLS
		s.Data = nb.data()
		// The resourceVersion read above makes the update conditional.
		err = c.Update(ctx, &s)
		if apierrors.IsConflict(err) {
			continue // another replica renewed it first: use its
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("renew certificate in Secret %s (%s): %w", key, why, err)
		}
		return nb.certPEM, nb.keyPEM, nb.caPEM, nil
	}
	return nil, nil, nil, fmt.Errorf("ensure certificate in Secret %s: still conflicting after %d attempts", key, ensureAttempts)
}

func (b certBundle) data() map[string][]byte {
	return map[string][]byte{
		corev1.TLSCertKey:       b.certPEM,
		corev1.TLSPrivateKeyKey: b.keyPEM,
		SecretCAKey:             b.caPEM,
		SecretCAPrivateKey:      b.caKeyPEM,
	}
}

// authority is a CA that can sign, with the older CAs still trusted.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
	older   []*x509.Certificate // previous CAs still in the bundle
}

// checkBundle reads the Secret's data. It returns the bundle and an empty
// reason when it can serve as is; otherwise the reason to renew and the
// CA to keep (nil when the CA must be replaced too, with the old CA to
// keep trusting in older).
func checkBundle(data map[string][]byte, opts CertOptions) (certBundle, *authority, string) {
	now := opts.Now()
	b := certBundle{certPEM: data[corev1.TLSCertKey], keyPEM: data[corev1.TLSPrivateKeyKey], caPEM: data[SecretCAKey], caKeyPEM: data[SecretCAPrivateKey]}
	cas, err := parseCerts(b.caPEM)
	if err != nil || len(cas) == 0 {
		return b, nil, "no readable CA"
	}
	caKey, err := parseKey(b.caKeyPEM)
	if err != nil || !publicKeyMatches(cas[0], caKey) || !cas[0].IsCA {
		return b, nil, "no readable CA key"
	}
	ca := &authority{cert: cas[0], key: caKey, certPEM: pemCert(cas[0].Raw), keyPEM: b.caKeyPEM}
	if now.Before(cas[0].NotBefore) {
		return b, nil, "CA not valid before " + cas[0].NotBefore.UTC().Format(time.RFC3339)
	}
	if !now.Add(opts.RenewBefore).Before(cas[0].NotAfter) {
		return b, &authority{older: []*x509.Certificate{cas[0]}}, "CA expires " + cas[0].NotAfter.UTC().Format(time.RFC3339)
	}
	for _, old := range cas[1:] {
		if now.Before(old.NotAfter) {
			ca.older = append(ca.older, old)
		}
	}
	if len(ca.older) != len(cas)-1 {
		return b, ca, "an old CA expired"
	}
	pair, err := tls.X509KeyPair(b.certPEM, b.keyPEM)
	if err != nil {
		return b, ca, "no readable serving certificate"
	}
	leaf := pair.Leaf
	roots := x509.NewCertPool()
	roots.AddCert(cas[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return b, ca, "serving certificate not valid for the CA: " + err.Error()
	}
	if !now.Add(opts.RenewBefore).Before(leaf.NotAfter) {
		return b, ca, "serving certificate expires " + leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	for _, h := range opts.Hosts() {
		if err := leaf.VerifyHostname(h); err != nil {
			return b, ca, "serving certificate does not cover " + h
		}
	}
	return b, nil, ""
}

// newBundle issues a serving certificate for opts' hosts, signed by ca, or
// by a new CA when ca has no key (keeping ca.older trusted in the bundle).
func newBundle(opts CertOptions, ca *authority) (certBundle, error) {
	now := opts.Now()
	if ca == nil || ca.key == nil {
		var older []*x509.Certificate
		if ca != nil {
			for _, o := range ca.older {
				if now.Before(o.NotAfter) {
					older = append(older, o)
				}
			}
		}
		var err error
		if ca, err = newAuthority(opts, now); err != nil {
			return certBundle{}, err
		}
		ca.older = older
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certBundle{}, fmt.Errorf("generate serving key: %w", err)
	}
	hosts := opts.Hosts()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: hosts[0]},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(opts.CertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return certBundle{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyPEM, err := pemKey(key)
	if err != nil {
		return certBundle{}, err
	}
	caPEM := append([]byte(nil), ca.certPEM...)
	for _, o := range ca.older {
		caPEM = append(caPEM, pemCert(o.Raw)...)
	}
	return certBundle{certPEM: pemCert(der), keyPEM: keyPEM, caPEM: caPEM, caKeyPEM: ca.keyPEM}, nil
}

func newAuthority(opts CertOptions, now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("kerf-webhook-ca@%d", now.Unix()), Organization: []string{"kerf"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(opts.CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	keyPEM, err := pemKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: pemCert(der), keyPEM: keyPEM}, nil
}

func serial() *big.Int {
	// rand.Int fails only if the system's randomness does; x509 would fail
	// the same way right after.
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCerts(p []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, p = pem.Decode(p)
		if block == nil {
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
}

func parseKey(p []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", k)
	}
	return s, nil
}

func publicKeyMatches(c *x509.Certificate, key crypto.Signer) bool {
	pub, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

// SelfManagedCertificate serves the Secret-backed certificate of
// EnsureSelfManagedCert and keeps it fresh: Run renews it before it expires
// and keeps the webhook configuration's caBundle equal to the Secret's CA
// bundle.
type SelfManagedCertificate struct {
	c             client.Client
	opts          CertOptions
	webhookConfig string
	log           *slog.Logger

	cert atomic.Pointer[tls.Certificate]
	ca   atomic.Pointer[[]byte]
	// published is whether the last patch (caBundle, CA ConfigMap)
	// succeeded.
	published atomic.Bool
}

// NewSelfManagedCertificate ensures the certificate (see
// EnsureSelfManagedCert) and, when webhookConfigName is not empty, patches
// that MutatingWebhookConfiguration's caBundle, and when opts.CAConfigMap is
// set, publishes the CA bundle there. A failed patch is logged, not
// returned: the webhook fails open (and clients of the ConfigMap wait)
// until Run patches it.
func NewSelfManagedCertificate(ctx context.Context, c client.Client, opts CertOptions, webhookConfigName string, log *slog.Logger) (*SelfManagedCertificate, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &SelfManagedCertificate{c: c, opts: opts, webhookConfig: webhookConfigName, log: log.With("component", "webhook-cert")}
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	if err := s.patch(ctx); err != nil {
		s.log.Warn("CA bundle not published; clients cannot verify the certificate until it is",
			"webhookConfiguration", webhookConfigName, "caConfigMap", opts.CAConfigMap, "err", err)
	}
	return s, nil
}

func (s *SelfManagedCertificate) ensure(ctx context.Context) error {
	certPEM, keyPEM, caPEM, err := EnsureSelfManagedCert(ctx, s.c, s.opts)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("load self-managed certificate: %w", err)
	}
	if old := s.cert.Load(); old == nil || !bytes.Equal(old.Certificate[0], pair.Certificate[0]) {
		s.log.Info("serving certificate loaded", "secret", s.opts.Namespace+"/"+s.opts.SecretName,
			"notAfter", pair.Leaf.NotAfter, "hosts", s.opts.Hosts())
	}
	s.cert.Store(&pair)
	s.ca.Store(&caPEM)
	return nil
}

func (s *SelfManagedCertificate) patch(ctx context.Context) error {
	var err error
	if s.webhookConfig != "" {
		err = PatchCABundle(ctx, s.c, s.webhookConfig, s.CABundle())
	}
	if s.opts.CAConfigMap != "" {
		err = errors.Join(err, PublishCA(ctx, s.c, s.opts.Namespace, s.opts.CAConfigMap, s.CABundle()))
	}
	s.published.Store(err == nil)
	return err
}

// CAConfigMapKey is the key of the CA bundle in the ConfigMap PublishCA
// writes (the name clients mount it under).
const CAConfigMapKey = "ca.crt"

// PublishCA sets caPEM as key ca.crt of the ConfigMap namespace/name,
// creating the ConfigMap when absent. It writes only when the bundle
// differs, and retries on conflicts, so replicas may all call it.
func PublishCA(ctx context.Context, c client.Client, namespace, name string, caPEM []byte) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	racing := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, racing, func() error {
		var cm corev1.ConfigMap
		err := c.Get(ctx, key, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: namespace, Name: name,
					Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/managed-by": "kerf"},
				},
				Data: map[string]string{CAConfigMapKey: string(caPEM)},
			}
			return c.Create(ctx, &cm)
		}
		if err != nil {
			return err
		}
		if cm.Data[CAConfigMapKey] == string(caPEM) {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[CAConfigMapKey] = string(caPEM)
		// The resourceVersion read above makes the update conditional.
		return c.Update(ctx, &cm)
	})
	if err != nil {
		return fmt.Errorf("publish CA bundle in ConfigMap %s: %w", key, err)
	}
	return nil
}

// CABundle returns the CA bundle in PEM that verifies the serving
// certificate.
func (s *SelfManagedCertificate) CABundle() []byte {
	if p := s.ca.Load(); p != nil {
		return *p
	}
	return nil
}

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate.
func (s *SelfManagedCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// Run re-ensures the certificate, the caBundle and the CA ConfigMap every
// interval until ctx ends, retrying sooner (from 5s, doubling) after a
// failure. Each replica runs it; the Secret keeps them agreeing.
func (s *SelfManagedCertificate) Run(ctx context.Context, interval time.Duration) {
	const firstRetry = 5 * time.Second
	wait := interval
	if !s.published.Load() || s.webhookConfig != "" && !bytes.Equal(s.currentCABundle(ctx), s.CABundle()) {
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
func (s *SelfManagedCertificate) currentCABundle(ctx context.Context) []byte {
	cfg, err := getConfiguration(ctx, s.c, s.webhookConfig)
	if err != nil || len(cfg.Webhooks) == 0 {
		return nil
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

// FileCertificate serves a certificate from a directory holding tls.crt and
// tls.key (a mounted Secret, as cert-manager writes it), reloading them when
// their modification time or size changes. The check is a stat per TLS
// handshake; the apiserver keeps its connections open, so handshakes are
// few.
type FileCertificate struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // of the files loaded into cert
	tried   string // of the files last tried, loaded or not
	lastErr error
}

// NewFileCertificate loads dir/tls.crt and dir/tls.key, and fails when they
// do not make a key pair.
func NewFileCertificate(dir string, log *slog.Logger) (*FileCertificate, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &FileCertificate{
		certFile: filepath.Join(dir, corev1.TLSCertKey),
		keyFile:  filepath.Join(dir, corev1.TLSPrivateKeyKey),
		log:      log.With("component", "webhook-cert"),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reloadLocked(); err != nil {
		return nil, err
	}
	return f, nil
}

// GetCertificate returns the certificate, first reloading the files when
// they changed; when the new files do not load, the previous certificate is
// kept and the error logged once.
func (f *FileCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reloadLocked(); err != nil && f.cert == nil {
		return nil, err
	}
	return f.cert, nil
}

func (f *FileCertificate) reloadLocked() error {
	stamp, err := fileStamp(f.certFile, f.keyFile)
	if err != nil {
		return f.failLocked(stamp, err)
	}
	if stamp == f.stamp && f.cert != nil {
		return nil
	}
	if stamp == f.tried && f.lastErr != nil {
		return f.lastErr
	}
	pair, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return f.failLocked(stamp, fmt.Errorf("load %s and %s: %w", f.certFile, f.keyFile, err))
	}
	f.cert, f.stamp, f.tried, f.lastErr = &pair, stamp, stamp, nil
	f.log.Info("serving certificate loaded", "file", f.certFile, "notAfter", pair.Leaf.NotAfter)
	return nil
}

func (f *FileCertificate) failLocked(stamp string, err error) error {
	if stamp != f.tried || f.lastErr == nil {
		f.log.Error("serving certificate not reloaded; keeping the previous one", "err", err)
	}
	f.tried, f.lastErr = stamp, err
	return err
}

// fileStamp identifies the current content of the files by modification
// time and size (following symlinks, as a mounted Secret's are).
func fileStamp(paths ...string) (string, error) {
	var b bytes.Buffer
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return b.String(), fmt.Errorf("stat %s: %w", p, err)
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, st.ModTime().UnixNano(), st.Size())
	}
	return b.String(), nil
}
