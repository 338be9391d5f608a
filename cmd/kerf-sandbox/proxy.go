package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/kerf-dev/kerf/internal/scenario"
)

// leaderProxy serves, on a loopback port of this machine, the elected
// leader's pages and API with the scenarios' reader token added: the
// leader asks every caller for a Kubernetes token (docs/security.md), which
// a browser cannot send by itself. It is the demo's convenience, never
// part of an installed Kerf (docs/web.md says what to put in front of a
// real leader). It returns the proxy's base URL and stops with ctx.
func leaderProxy(ctx context.Context, e *scenario.Env, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			// The leader may have changed since the last request (a
			// failover): look it up each time.
			base, err := e.LeaderURL(r.In.Context())
			if err != nil {
				base = "https://leader-not-found.invalid"
			}
			u, _ := url.Parse(base)
			r.SetURL(u)
			if err := e.Authorize(r.Out); err != nil {
				log.Warn("no reader token for the demo's proxy", "err", err)
			}
		},
		// The leader serves HTTPS: checked against the CA it publishes.
		Transport: e.KerfTransport(),
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("the demo's leader proxy stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return "http://" + ln.Addr().String(), nil
}
