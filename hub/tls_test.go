package hub

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/selfsigned"
)

// writePair writes a new self-signed certificate and its key as PEM files,
// dated at, and returns the certificate's DER.
func writePair(t *testing.T, certFile, keyFile string, at time.Time) []byte {
	t.Helper()
	pair, err := selfsigned.New("kerf-hub", []string{"kerf-hub.kerf-hub.svc"}, 365*24*time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pair.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, pair.KeyPEM, 0o600))
	for _, p := range []string{certFile, keyFile} {
		require.NoError(t, os.Chtimes(p, at, at))
	}
	return pair.TLS.Certificate[0]
}

// TestARenewedCertificateIsServedWithoutARestart: the files of a Secret
// change (cert-manager renewed it); the next handshake after the interval
// gets the new certificate; files that do not load keep the old one.
func TestARenewedCertificateIsServedWithoutARestart(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writePair(t, certFile, keyFile, time.Now().Add(-time.Hour))
	files, err := loadCertFiles(certFile, keyFile, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	files.interval = time.Millisecond
	got, err := files.GetCertificate(nil)
	require.NoError(t, err)
	assert.Equal(t, first, got.Certificate[0])

	second := writePair(t, certFile, keyFile, time.Now())
	time.Sleep(2 * time.Millisecond)
	got, err = files.GetCertificate(nil)
	require.NoError(t, err)
	assert.Equal(t, second, got.Certificate[0], "the renewed pair is served")

	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	time.Sleep(2 * time.Millisecond)
	got, err = files.GetCertificate(nil)
	require.NoError(t, err)
	assert.Equal(t, second, got.Certificate[0], "a broken renewal keeps what is served")

	_, err = loadCertFiles(filepath.Join(dir, "missing.crt"), keyFile, slog.New(slog.DiscardHandler))
	assert.ErrorContains(t, err, "missing.crt")
}
