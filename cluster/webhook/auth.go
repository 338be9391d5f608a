package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// DefaultClientName is the common name the webhook expects on the
// apiserver's client certificate unless told otherwise (docs/install.md
// issues it with that name).
const DefaultClientName = "kube-apiserver-webhook-client"

// ErrNoClientAuth is returned when the webhook would serve without
// authenticating its callers and was not told explicitly that it may.
var ErrNoClientAuth = errors.New("the webhook authenticates the apiserver by its client certificate: give --webhook-client-ca " +
	"(docs/install.md, the apiserver's admission kubeconfig), or --webhook-allow-unauthenticated to serve anyone who reaches the port")

// ClientAuth is how the webhook authenticates who calls it. An
// AdmissionReview's answer carries the values Kerf holds for the pod's
// workload, so a caller that is not the apiserver could read another
// namespace's values with a forged review. The apiserver authenticates to a
// webhook with the client certificate of its admission kubeconfig
// (AdmissionConfiguration, WebhookAdmission's kubeConfigFile); the webhook
// requires that certificate at the TLS handshake.
type ClientAuth struct {
	// CAFile is a PEM bundle the caller's certificate must chain to. It is
	// read again when it changes (a mounted ConfigMap is updated in place),
	// so a rotated CA needs no restart.
	CAFile string
	// Names are the common names accepted on the caller's certificate;
	// empty accepts any certificate CAFile signed (a CA that signs only
	// the apiserver's). With the cluster's CA, which signs every node's
	// and user's certificate too, name the apiserver's.
	Names []string
	// AllowUnauthenticated serves callers without a certificate. It must
	// be asked for: the zero ClientAuth refuses to serve.
	AllowUnauthenticated bool
}

// Validate says whether the settings are usable: a CA, or an explicit
// AllowUnauthenticated, and not both.
func (a ClientAuth) Validate() error {
	switch {
	case a.CAFile == "" && !a.AllowUnauthenticated:
		return ErrNoClientAuth
	case a.CAFile != "" && a.AllowUnauthenticated:
		return errors.New("--webhook-client-ca and --webhook-allow-unauthenticated exclude each other")
	case a.CAFile == "" && len(a.Names) > 0:
		return errors.New("--webhook-client-name needs --webhook-client-ca")
	}
	return nil
}

// ServerTLS returns base, which gives the serving certificate, with the
// callers authenticated. A client certificate is required and must chain
// to CAFile with one of Names, or the handshake fails before any request
// is read. With AllowUnauthenticated it returns base as it is and logs a
// warning that says what this leaves open.
func (a ClientAuth) ServerTLS(base *tls.Config, log *slog.Logger) (*tls.Config, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if a.AllowUnauthenticated {
		log.Warn("the webhook does not authenticate its callers (--webhook-allow-unauthenticated): anyone who reaches its port can send a forged AdmissionReview and read the values Kerf holds for any namespace's workloads; configure the apiserver's admission kubeconfig and --webhook-client-ca (docs/install.md)")
		return base, nil
	}
	ca := &caFile{path: a.CAFile, log: log}
	if _, err := ca.get(); err != nil {
		return nil, err
	}
	names := slices.Clone(a.Names)
	cfg := base.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := ca.get()
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		return c, nil
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("webhook: no client certificate")
		}
		cn := cs.PeerCertificates[0].Subject.CommonName
		if len(names) > 0 && !slices.Contains(names, cn) {
			return fmt.Errorf("webhook: client certificate %q is not one of %v (--webhook-client-name)", cn, names)
		}
		return nil
	}
	log.Info("the webhook requires the apiserver's client certificate", "clientCA", a.CAFile, "clientNames", names)
	return cfg, nil
}

// caFile is a CA bundle read from a file. It is read again when the
// file's modification time or size changes. A bundle that no longer
// parses keeps the last good one, and says so.
type caFile struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	modTime time.Time
	size    int64
	pem     []byte
	pool    *x509.CertPool
}

// get returns the pool of the file as it is now.
func (f *caFile) get() (*x509.CertPool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if err == nil && f.pool != nil && st.ModTime().Equal(f.modTime) && st.Size() == f.size {
		return f.pool, nil
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(f.path)
	}
	var pool *x509.CertPool
	if err == nil {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			err = fmt.Errorf("no PEM certificate in %s", f.path)
		}
	}
	if err != nil {
		if f.pool == nil {
			return nil, fmt.Errorf("read the webhook's client CA (--webhook-client-ca): %w", err)
		}
		f.log.Error("read the webhook's client CA again; keeping the last one read", "clientCA", f.path, "err", err)
		if st != nil {
			f.modTime, f.size = st.ModTime(), st.Size() // said once per change, not per handshake
		}
		return f.pool, nil
	}
	if f.pool != nil && !bytes.Equal(data, f.pem) {
		f.log.Info("the webhook's client CA changed; using the new one", "clientCA", f.path)
	}
	f.modTime, f.size, f.pem, f.pool = st.ModTime(), st.Size(), data, pool
	return pool, nil
}
