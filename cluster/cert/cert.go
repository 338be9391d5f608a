// Package cert gives the leader's servers their TLS certificates, one
// Source each, and signs the agents' /metrics certificates.
//
// The servers are the admission webhook, the agents' stream and the
// endpoints' listener, which kerf-leader gives the stream's. A Source is
// one of:
//   - a directory the user supplies, such as a mounted Secret as
//     cert-manager writes it, reloaded when its files change (File);
//   - a certificate Kerf manages itself (EnsureSelfManaged, SelfManaged).
//     It is kept in a Secret shared by the replicas and renewed before it
//     expires.
//
// A self-managed certificate's CA bundle is published to those that
// verify it: a MutatingWebhookConfiguration's caBundle (PatchCABundle)
// and a ConfigMap the agents mount (PublishCA). Its CA also signs the
// agents' /metrics certificates (SelfManaged.Issue).
package cert

import (
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
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the self-managed certificate's Secret (type kubernetes.io/tls).
const (
	// SecretCAKey holds the CA bundle in PEM: the current CA first, then a
	// previous CA while it is still valid. So serving certificates of both
	// are trusted during a CA rotation.
	SecretCAKey = "ca.crt"
	// SecretCAPrivateKey holds the current CA's private key in PEM.
	SecretCAPrivateKey = "ca.key"
)

// Defaults of Options.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	DefaultRenewBefore  = 30 * 24 * time.Hour
)

// ensureAttempts bounds how often EnsureSelfManaged re-reads the Secret
// after losing a race to another replica.
const ensureAttempts = 5

// Options say where the self-managed certificate lives and whom it
// serves.
type Options struct {
	// Namespace is the namespace of the server's Service and of the Secret.
	Namespace string
	// ServiceName is the server's Service: the serving certificate is for
	// <service>.<namespace>.svc, the name its clients call.
	ServiceName string
	// SecretName is the Secret that holds the CA and the serving
	// certificate, shared by every replica.
	SecretName string
	// ExtraHosts are further DNS names or IP addresses the serving
	// certificate covers.
	ExtraHosts []string
	// CAConfigMap, when set, names a ConfigMap in Namespace where a
	// SelfManaged publishes the CA bundle (key ca.crt), for
	// clients other than the apiserver: the agents verify the leader's
	// stream certificate with it.
	CAConfigMap string
	// WebhookConfiguration, when set, names the
	// MutatingWebhookConfiguration whose caBundle a SelfManaged keeps
	// equal to the CA bundle, so the apiserver trusts the webhook.
	WebhookConfiguration string
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

func (o Options) withDefaults() (Options, error) {
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
func (o Options) Hosts() []string {
	svc := o.ServiceName + "." + o.Namespace + ".svc"
	return append([]string{svc, svc + ".cluster.local"}, o.ExtraHosts...)
}

// certBundle is the content of the Secret.
type certBundle struct {
	certPEM, keyPEM, caPEM, caKeyPEM []byte
}

// EnsureSelfManaged returns the serving certificate, its key and the CA
// bundle kept in the Secret opts names. It creates the Secret when it is
// absent. It renews what the Secret holds when that is unreadable, does
// not cover opts' hosts or is within RenewBefore of its expiry.
//
// Every replica calls it and all end up with the Secret's content. A
// replica that loses the race to create or update the Secret
// (AlreadyExists, Conflict) reads the winner's.
//
// c should read Secrets from the apiserver, not from a cache. A cache
// would watch every Secret of the cluster and could miss the winner's
// write.
func EnsureSelfManaged(ctx context.Context, c client.Client, opts Options) (certPEM, keyPEM, caPEM []byte, err error) {
	b, err := ensureSelfManaged(ctx, c, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return b.certPEM, b.keyPEM, b.caPEM, nil
}

// ensureSelfManaged is EnsureSelfManaged returning the whole bundle, the
// CA's key included.
func ensureSelfManaged(ctx context.Context, c client.Client, opts Options) (certBundle, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return certBundle{}, err
	}
	key := client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}
	for range ensureAttempts {
		var s corev1.Secret
		err := c.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			b, err := newBundle(opts, nil)
			if err != nil {
				return certBundle{}, err
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
				return certBundle{}, fmt.Errorf("create Secret %s: %w", key, err)
			}
			return b, nil
		}
		if err != nil {
			return certBundle{}, fmt.Errorf("get Secret %s: %w", key, err)
		}

		b, ca, why := checkBundle(s.Data, opts)
		if why == "" {
			return b, nil
		}
		nb, err := newBundle(opts, ca)
		if err != nil {
			return certBundle{}, err
		}
		s.Type = corev1.SecretTypeTLS
		s.Data = nb.data()
		// The resourceVersion read above makes the update conditional.
		err = c.Update(ctx, &s)
		if apierrors.IsConflict(err) {
			continue // another replica renewed it first: use its
		}
		if err != nil {
			return certBundle{}, fmt.Errorf("renew certificate in Secret %s (%s): %w", key, why, err)
		}
		return nb, nil
	}
	return certBundle{}, fmt.Errorf("ensure certificate in Secret %s: still conflicting after %d attempts", key, ensureAttempts)
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
// reason when it can serve as is. Otherwise it returns the reason to renew
// and the CA to keep. When the CA must be replaced too, that is nil, or an
// authority without a key whose older holds the old CA to keep trusting.
func checkBundle(data map[string][]byte, opts Options) (certBundle, *authority, string) {
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
// by a new CA when ca has no key. A new CA keeps those of ca.older still
// valid trusted in the bundle.
func newBundle(opts Options, ca *authority) (certBundle, error) {
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

func newAuthority(opts Options, now time.Time) (*authority, error) {
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
