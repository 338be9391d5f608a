// Package hub is kerf-hub, the service that keeps every cluster's actions
// in one durable place (docs/design.md section 7b, docs/hub.md): the write
// API leaders deliver batches to, the read API (audit, workloads, history,
// clusters), /metrics, token authentication and retention. It holds no
// state of its own beyond the database (hub/store), so several replicas may
// serve one PostgreSQL.
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/singleflight"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/httpjson"
)

// Server serves the hub's HTTP API over a store.
type Server struct {
	// Store is the database.
	Store *store.Store
	// MaxBodyBytes is the largest write body read; 0 means
	// hubv1.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Now is the clock `since` durations count back from; nil means
	// time.Now.
	Now func() time.Time
	// Log receives errors; nil means slog.Default().
	Log *slog.Logger
	// Registry gathers /metrics; New makes one with the hub's collector.
	Registry *prometheus.Registry

	ready readiness
	// savingsReports counts kerf_hub_savings_reports_total; nil counts
	// nothing.
	savingsReports *prometheus.CounterVec
}

// readiness is the readiness probe's answer, shared: the database is
// pinged at most once every readyFor, by one probe, and every probe
// meanwhile gets that answer. /readyz is anonymous and exempt from the
// in-flight cap (the kubelet must get through a flood), so a flood of it
// costs the database one ping a second whatever its size.
type readiness struct {
	group singleflight.Group
	mu    sync.Mutex
	at    time.Time
	err   error
	// pings counts kerf_hub_readiness_pings_total; nil counts nothing.
	pings prometheus.Counter
}

// readyFor is how long a readiness answer is given again.
const readyFor = time.Second

// check returns the database's answer, pinging it when the last answer
// is older than readyFor.
func (r *readiness) check(st *store.Store) error {
	r.mu.Lock()
	if !r.at.IsZero() && time.Since(r.at) < readyFor {
		err := r.err
		r.mu.Unlock()
		return err
	}
	r.mu.Unlock()
	v, _, _ := r.group.Do("ping", func() (any, error) {
		// Not a probe's context: the ping is every waiting probe's.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r.pings != nil {
			r.pings.Inc()
		}
		err := st.Ping(ctx)
		r.mu.Lock()
		r.at, r.err = time.Now(), err
		r.mu.Unlock()
		return err, nil
	})
	err, _ := v.(error)
	return err
}

// New returns a Server over st whose /metrics serves kerf_actions_total
// from the database.
func New(st *store.Store, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	pings := prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_hub_readiness_pings_total",
		Help: "Database pings made for the readiness probe (at most one a second, shared by the probes meanwhile)."})
	savingsReports := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kerf_hub_savings_reports_total",
		Help: "Savings reports the leaders sent, by result: stored, superseded (older than the one stored), refused (invalid, too large, or from a removed cluster)."}, []string{"result"})
	for _, r := range []string{"stored", "superseded", "refused"} {
		savingsReports.WithLabelValues(r)
	}
	reg.MustRegister(&actionsCollector{store: st, log: log}, pings, savingsReports)
	return &Server{Store: st, Now: time.Now, Log: log, Registry: reg, ready: readiness{pings: pings}, savingsReports: savingsReports}
}

// Handler returns the hub's routes. Every route but the probes (/healthz,
// /readyz) needs a bearer token: a cluster's for its write routes, a
// reader's for the rest; the pages under /ui/ also take a sign-in session
// (ui.go).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/clusters/{cluster}/actions", s.writer(s.serveWrite))
	mux.Handle("PUT /v1/clusters/{cluster}/savings", s.writer(s.serveSavings))
	mux.Handle("GET /v1/audit", s.reader(s.serveAudit))
	mux.Handle("GET /v1/workloads", s.reader(s.serveWorkloads))
	mux.Handle("GET /v1/workloads/{id}/history", s.reader(s.serveHistory))
	mux.Handle("GET /v1/clusters", s.reader(s.serveClusters))
	metrics := promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log()}})
	mux.Handle("GET /metrics", s.reader(metrics.ServeHTTP))
	mux.HandleFunc("GET /healthz", s.serveLive)
	mux.HandleFunc("GET /readyz", s.serveReady)
	s.mountUI(mux)
	for _, p := range []string{"/v1/clusters/{cluster}/actions"} {
		mux.HandleFunc(p, methodNotAllowed("POST"))
	}
	mux.HandleFunc("/v1/clusters/{cluster}/savings", methodNotAllowed("PUT"))
	for _, p := range []string{"/v1/audit", "/v1/workloads", "/v1/workloads/{id}/history", "/v1/clusters", "/metrics", "/healthz", "/readyz"} {
		mux.HandleFunc(p, methodNotAllowed("GET, HEAD"))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusNotFound, auditv1.Error{Error: fmt.Sprintf("no route %s %s (docs/hub.md lists the API)", r.Method, r.URL.Path)})
	})
	return mux
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httpjson.Write(w, http.StatusMethodNotAllowed, auditv1.Error{Error: fmt.Sprintf("method %s: must be %s", r.Method, strings.ReplaceAll(allow, ", ", " or "))})
	}
}

// serveLive is the liveness probe: the process serves HTTPS. It does not
// ask the database, so that a database outage makes the replicas unready
// (readyz) rather than restarted in a loop.
func (s *Server) serveLive(w http.ResponseWriter, _ *http.Request) {
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady is the readiness probe: the database answered a ping within
// 5 s, at most readyFor ago.
func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	if err := s.ready.check(s.Store); err != nil {
		s.log().Error("readiness check failed", "err", err)
		httpjson.Write(w, http.StatusServiceUnavailable, auditv1.Error{Error: "database unavailable"})
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Server) maxBody() int64 {
	if s.MaxBodyBytes <= 0 {
		return hubv1.DefaultMaxBodyBytes
	}
	return s.MaxBodyBytes
}

// failed answers a store error the client did not cause: 500, logged, with
// no detail of the database in the body.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.log().Error("hub request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	httpjson.Write(w, http.StatusInternalServerError, auditv1.Error{Error: "internal error; the hub logged it"})
}

// slogPrinter lets promhttp log through slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error("metrics", "err", fmt.Sprint(v...)) }
