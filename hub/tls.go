package hub

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

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
