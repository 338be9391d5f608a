// Package endpoints serves the HTTP endpoints every Kerf binary has:
// /metrics (Prometheus), /healthz (the process is alive) and /readyz (it can
// do its job now: for the leader, it holds the lease).
package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves /metrics, /healthz and /readyz, plus any extra handlers.
type Server struct {
	mux   *http.ServeMux
	ready func() bool
}

// Option changes how a Server serves.
type Option func(*promhttp.HandlerOpts)

// Uncompressed serves /metrics without gzip or zstd whatever the scraper
// accepts. The agent uses it: a node's series are a few hundred KB on the
// pod network, and the gzip encoder held 2-3 MiB of the agent's heap
// between scrapes (docs/agent.md, Budget).
func Uncompressed() Option {
	return func(o *promhttp.HandlerOpts) { o.DisableCompression = true }
}

// New returns a Server that exposes gatherer on /metrics and reports ready
// while ready returns true (nil means always ready).
func New(gatherer prometheus.Gatherer, ready func() bool, opts ...Option) *Server {
	s := &Server{mux: http.NewServeMux(), ready: ready}
	var ho promhttp.HandlerOpts
	for _, o := range opts {
		o(&ho)
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, ho))
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
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
}
