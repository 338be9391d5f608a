package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kerf-dev/kerf/internal/endpoints"
)

// shutdownGrace is how long ServeListener lets reviews in flight finish.
const shutdownGrace = 5 * time.Second

// healthPath is the webhook's probe, served whatever the load.
const healthPath = "/healthz"

// Mux routes Path to the injector and answers /healthz.
func Mux(injector http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(Path, injector)
	mux.HandleFunc(healthPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ServeListener is ServeListenerWithin with endpoints.DefaultLimits, the
// limits of every Kerf HTTP server.
func ServeListener(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, h http.Handler) error {
	return ServeListenerWithin(ctx, ln, tlsConfig, h, endpoints.DefaultLimits())
}

// ServeListenerWithin serves h over HTTPS on ln within limits until ctx
// ends. Then it shuts down, letting reviews in flight finish, closes ln
// and returns nil. The caller opens ln, so that a port is bound before
// anything else starts.
//   - Headers over limits.MaxHeaderBytes get 431.
//   - Past limits.MaxInFlight requests a review gets 503 with Retry-After;
//     the apiserver then applies the webhook's failurePolicy. /healthz is
//     served whatever the load.
//   - tlsConfig must give a certificate, in Certificates or
//     GetCertificate. Its client authentication (ClientAuth.ServerTLS)
//     runs at the handshake, before any limit is spent on a request.
func ServeListenerWithin(ctx context.Context, ln net.Listener, tlsConfig *tls.Config, h http.Handler, limits endpoints.Limits) error {
	if tlsConfig == nil || (len(tlsConfig.Certificates) == 0 && tlsConfig.GetCertificate == nil) {
		_ = ln.Close()
		return errors.New("serve webhook: the TLS configuration gives no certificate")
	}
	srv := limits.Server(h, healthPath)
	srv.TLSConfig = tlsConfig.Clone()
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
