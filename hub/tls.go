package hub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// SelfSigned makes a TLS certificate for hosts (names or IP addresses),
// signed by its own ECDSA P-256 key and valid for a year, and returns it
// with its certificate as PEM, which clients pass as their CA
// (curl --cacert). The key never leaves memory. It is for tests, demos and
// a first run; production gives kerf-hub --tls-cert-file and --tls-key-file.
func SelfSigned(hosts []string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kerf-hub"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("sign TLS certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("read back TLS certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, certPEM, nil
}

// certFiles serves the certificate and key of two PEM files and reads them
// again when they change (a Secret's rotation, cert-manager's renewal),
// looking at most once per interval, so a renewed certificate is served
// without a restart. A pair that fails to load keeps the one served.
type certFiles struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and modification times
	checked time.Time
}

// loadCertFiles reads the pair once, failing when it cannot.
func loadCertFiles(certFile, keyFile string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, interval: 30 * time.Second, log: log}
	stamp, err := c.fileStamp()
	if err != nil {
		return nil, err
	}
	if err := c.load(stamp); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certFiles) fileStamp() (string, error) {
	var b strings.Builder
	for _, p := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func (c *certFiles) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.stamp = &cert, stamp
	return nil
}

// GetCertificate is tls.Config.GetCertificate: the pair, read again when
// the files changed since the last look.
func (c *certFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= c.interval {
		c.checked = now
		stamp, err := c.fileStamp()
		if err == nil && stamp != c.stamp {
			err = c.load(stamp)
			if err == nil {
				c.log.Info("serving the renewed TLS certificate", "certFile", c.certFile)
			}
		}
		if err != nil {
			c.log.Error("keeping the TLS certificate served; the files could not be read again", "err", err)
		}
	}
	return c.cert, nil
}
