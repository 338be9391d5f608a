// Package endpoints serves the HTTP endpoints every Kerf binary has:
// /metrics (Prometheus), /healthz (the process is alive) and /readyz (it can
// do its job now: for the leader, it holds the lease). It also holds the
// limits every Kerf HTTP server runs with (Limits, Limits.Server).
package endpoints

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kerf-dev/kerf/internal/authn"
)

// Server serves /metrics, /healthz and /readyz, plus any extra handlers.
type Server struct {
	mux    *http.ServeMux
	ready  func() bool
	limits Limits
	authn  *authn.Authenticator
	tls    *tls.Config
}

type settings struct {
	handler promhttp.HandlerOpts
	metrics *authn.Authenticator
	limits  Limits
	tls     *tls.Config
}

// Option changes how a Server serves.
type Option func(*settings)

// Uncompressed serves /metrics without gzip or zstd whatever the scraper
// accepts. The agent uses it: a node's series are a few hundred KB on the
// pod network, and the gzip encoder held 2-3 MiB of the agent's heap
// between scrapes (docs/agent.md, Budget).
func Uncompressed() Option {
	return func(s *settings) { s.handler.DisableCompression = true }
}

// MetricsAuthorizedBy serves /metrics only to callers whose bearer token a
// authenticates and who may `get` the non-resource URL /metrics (the
// kerf-metrics-reader ClusterRole): 401 without a valid token, 403 without
// the right. /healthz and /readyz stay open to the kubelet's probes.
// Every shipped binary serves its metrics this way (docs/security.md).
// Callers whose token a knows are served within Limits.MaxInFlight, the
// others within Limits.MaxNewInFlight (Limits.ServerKnowing).
func MetricsAuthorizedBy(a *authn.Authenticator) Option {
	return func(s *settings) { s.metrics = a }
}

// ServeTLS serves HTTPS (HTTP/2 or HTTP/1.1) with cfg: callers send
// bearer tokens, which must not cross the network in clear text.
func ServeTLS(cfg *tls.Config) Option {
	return func(s *settings) { s.tls = cfg }
}

// WithLimits replaces the server's DefaultLimits.
func WithLimits(l Limits) Option {
	return func(s *settings) { s.limits = l }
}

// New returns a Server that exposes gatherer on /metrics and reports ready
// while ready returns true (nil means always ready).
func New(gatherer prometheus.Gatherer, ready func() bool, opts ...Option) *Server {
	st := settings{limits: DefaultLimits()}
	for _, o := range opts {
		o(&st)
	}
	s := &Server{mux: http.NewServeMux(), ready: ready, limits: st.limits, authn: st.metrics, tls: st.tls}
	var metrics http.Handler = promhttp.HandlerFor(gatherer, st.handler)
	if st.metrics != nil {
		metrics = st.metrics.AuthorizedPath(metrics, nil)
	}
	s.mux.Handle("GET /metrics", metrics)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.ready != nil && !s.ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return s
}

// Mux is the server's mux, for packages that register their own routes.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Serve listens on addr and serves until ctx is done, then shuts down
// gracefully. It returns once the listener is closed.
func (s *Server) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on a listener the caller opened.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	exempt := []string{"/healthz", "/readyz"}
	srv := s.limits.Server(s.mux, exempt...)
	if s.authn != nil {
		srv = s.limits.ServerKnowing(s.mux, func(r *http.Request) (string, bool) {
			return s.authn.Known(authn.BearerToken(r))
		}, exempt...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	var err error
	if s.tls != nil {
		// ServeTLS adds h2 to the configuration's protocols.
		srv.TLSConfig = s.tls.Clone()
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
}
