package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownGrace is how long ServeListener lets reviews in flight finish.
const shutdownGrace = 5 * time.Second

// Mux routes Path to the injector and answers /healthz.
func Mux(injector http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(Path, injector)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ServeListener serves h over HTTPS on ln (the caller opens it, so that a
// port is bound before anything else starts) until ctx ends, then shuts
// down, letting reviews in flight finish, and closes ln. tlsConfig must
// give a certificate (Certificates or GetCertificate). It returns nil
// after a shutdown asked by ctx.
func ServeListener(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, h http.Handler) error {
	if tlsConfig == nil || (len(tlsConfig.Certificates) == 0 && tlsConfig.GetCertificate == nil) {
		_ = ln.Close()
		return errors.New("serve webhook: the TLS configuration gives no certificate")
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig.Clone(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve webhook on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("shut down webhook server on %s: %w", ln.Addr(), err)
	}
	return nil
}
