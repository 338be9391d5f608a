package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/internal/selfsigned"
)

// Config is what kerf-hub serve runs with.
type Config struct {
	// Listen is the HTTPS address, such as :9443.
	Listen string
	// Database is the store's DSN (sqlite:PATH or a PostgreSQL URL).
	Database string
	// CertFile and KeyFile are the TLS certificate and key; both or none.
	CertFile, KeyFile string
	// SelfSignedCertOut, when CertFile is empty, makes a self-signed
	// certificate for SelfSignedHosts and writes it (not its key) there.
	SelfSignedCertOut string
	// SelfSignedHosts are the names and addresses the self-signed
	// certificate is for.
	SelfSignedHosts []string
	// Retention is how long actions stay; RetentionEvery is how often old
	// ones are deleted.
	Retention, RetentionEvery time.Duration
	// MaxBodyBytes limits a write's body.
	MaxBodyBytes int64
	// Ready, if set, receives the listener's address once it serves.
	Ready func(addr net.Addr)
}

// Serve opens the store, listens with TLS and serves the hub until ctx
// ends, then drains requests for up to 10 s.
func Serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	tlsConfig, err := loadTLS(cfg, log)
	if err != nil {
		return err
	}
	if cfg.Retention <= 0 || cfg.RetentionEvery <= 0 {
		return fmt.Errorf("retention %s every %s: both must be positive", cfg.Retention, cfg.RetentionEvery)
	}
	st, err := store.Open(ctx, cfg.Database, log)
	if err != nil {
		return err
	}
	defer st.Close()
	srv := New(st, log)
	srv.MaxBodyBytes = cfg.MaxBodyBytes
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// Kerf's server limits (internal/endpoints), with the hub's own
	// minute to read a leader's batch and to answer.
	limits := endpoints.DefaultLimits()
	limits.ReadTimeout, limits.WriteTimeout, limits.IdleTimeout = 60*time.Second, 60*time.Second, 120*time.Second
	// The sign-in form has a budget of its own (MaxSignInsInFlight).
	hs := limits.Server(srv.Handler(), "/healthz", "/readyz", uiSignIn)
	hs.TLSConfig = tlsConfig
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	var wg sync.WaitGroup
	rctx, stopRetention := context.WithCancel(ctx)
	wg.Go(func() {
		(&Retention{Store: st, Keep: cfg.Retention, Every: cfg.RetentionEvery, Log: log}).Run(rctx)
	})
	defer func() { stopRetention(); wg.Wait() }()
	errc := make(chan error, 1)
	go func() { errc <- hs.ServeTLS(ln, "", "") }()
	log.Info("kerf-hub serving", "addr", ln.Addr().String(), "database", string(st.Dialect()), "retention", cfg.Retention.String())
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// loadTLS reads the configured certificate (and reads it again when its
// files change) or makes a self-signed one.
func loadTLS(cfg Config, log *slog.Logger) (*tls.Config, error) {
	switch {
	case cfg.CertFile != "" || cfg.KeyFile != "":
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("--tls-cert-file and --tls-key-file: give both")
		}
		files, err := loadCertFiles(cfg.CertFile, cfg.KeyFile, log)
		if err != nil {
			return nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: files.GetCertificate}, nil
	case cfg.SelfSignedCertOut != "":
		// Valid for a year; its key never leaves memory. It is for tests,
		// demos and a first run: production gives --tls-cert-file and
		// --tls-key-file.
		pair, err := selfsigned.New("kerf-hub", cfg.SelfSignedHosts, 365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(cfg.SelfSignedCertOut, pair.CertPEM, 0o644); err != nil {
			return nil, fmt.Errorf("write self-signed certificate: %w", err)
		}
		log.Info("serving a self-signed TLS certificate; clients trust it with --cacert", "certFile", cfg.SelfSignedCertOut, "hosts", cfg.SelfSignedHosts)
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair.TLS}}, nil
	default:
		return nil, errors.New("TLS is required: give --tls-cert-file and --tls-key-file, or --self-signed-cert-out PATH for a generated certificate")
	}
}
