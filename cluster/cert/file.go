package cert

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// File serves a certificate from a directory holding tls.crt and tls.key,
// such as a mounted Secret as cert-manager writes it. It reloads them
// when their modification time or size changes. The check is a stat per
// TLS handshake; the apiserver keeps its connections open, so handshakes
// are few.
type File struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // of the files loaded into cert
	tried   string // of the files last tried, loaded or not
	lastErr error
}

// NewFile loads dir/tls.crt and dir/tls.key, and fails when they
// do not make a key pair.
func NewFile(dir string, log *slog.Logger) (*File, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &File{
		certFile: filepath.Join(dir, corev1.TLSCertKey),
		keyFile:  filepath.Join(dir, corev1.TLSPrivateKeyKey),
		log:      log.With("component", "cert"),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reloadLocked(); err != nil {
		return nil, err
	}
	return f, nil
}

// GetCertificate returns the certificate, first reloading the files when
// they changed. When the new files do not load, the previous certificate
// is kept and the error logged once.
func (f *File) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.reloadLocked(); err != nil && f.cert == nil {
		return nil, err
	}
	return f.cert, nil
}

func (f *File) reloadLocked() error {
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

func (f *File) failLocked(stamp string, err error) error {
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
