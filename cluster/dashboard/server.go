package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/cluster/pages"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/internal/kube"
	webui "github.com/kerf-dev/kerf/web"
)

// UsageNote is what the workload pages say about their missing usage.
const UsageNote = "kubectl kerf dashboard reads the cluster with your credentials, and the usage series live in the leader's memory, " +
	"behind a bearer token the apiserver's proxy does not pass on: open the leader's page for them (docs/web.md)."

// Config is what a dashboard Server reads with and how.
type Config struct {
	// Rest is the user's client configuration, from the kubeconfig and
	// kubectl's flags. Every read is the user's.
	Rest *rest.Config
	// Namespace is the kubeconfig's namespace (or -n): Activity without
	// a filter redirects to it when the user may not list
	// recommendations in every namespace.
	Namespace string
	// Refresh is how often the pages reload themselves; zero means never.
	Refresh time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives the pages' read errors; nil means slog.Default().
	Log *slog.Logger
}

// Server serves the pages under a random path token made by New.
//
// Why a path token: a server on 127.0.0.1 is open to every process and
// every other user of the machine, and it reads with the kubeconfig's
// credentials; the token, in the address it prints, keeps them out.
// Why the Host check: a web page can point a name of its own at 127.0.0.1
// (DNS rebinding) and read the answers as same-origin; the browser then
// sends that name as Host, which the server refuses. The pages only read
// (GET and HEAD), so a cross-site request can change nothing, and no
// cookie or bearer token ever reaches the browser.
type Server struct {
	token   string
	handler http.Handler
}

// New returns a Server reading with cfg.Rest, under a new path token.
func New(cfg Config) (*Server, error) {
	c, err := client.New(cfg.Rest, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Rest.Host, err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make the path token: %w", err)
	}
	s := &Server{token: base64.RawURLEncoding.EncodeToString(raw)}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	pagesMux := http.NewServeMux()
	pagesMux.Handle("GET /ui/activity", narrowTo(c, cfg.Namespace, &webui.Activity{
		Source: &activity{reader: c, now: now, log: cfg.Log}, Refresh: cfg.Refresh, Log: cfg.Log,
	}))
	pagesMux.Handle("GET /ui/workloads/{namespace}/{name}", &webui.WorkloadPage{
		Source:  &pages.WorkloadViews{Reader: c, Now: now},
		Refresh: cfg.Refresh, ActivityHref: "../../activity", Log: cfg.Log, UsageNote: UsageNote,
	})
	pagesMux.Handle("GET /ui/savings", narrowTo(c, cfg.Namespace, &webui.Savings{
		Source: savingsSource{reader: c}, Refresh: cfg.Refresh, Now: now, Log: cfg.Log,
	}))
	pagesMux.Handle("GET /{$}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { found(w, "ui/activity") }))
	s.handler = loopbackHost(s.withToken(pagesMux))
	return s, nil
}

// Path is the Activity page's path, token included.
func (s *Server) Path() string { return "/" + s.token + "/ui/activity" }

// Handler serves the pages: requests to the token's path from a loopback
// Host; 404 without the token, 403 with another Host.
func (s *Server) Handler() http.Handler { return s.handler }

// URL is the Activity page's address on ln.
func (s *Server) URL(ln net.Listener) string {
	return (&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: s.Path()}).String()
}

// Serve serves the pages on ln, within endpoints.DefaultLimits, until ctx
// is done.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := endpoints.DefaultLimits().Server(s.handler)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// Listen listens on address, which must be a loopback one such as
// 127.0.0.1:0, [::1]:8080 or localhost:8080. The server reads with the
// user's credentials, so nothing off the machine may reach it.
func Listen(address string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("--address %q: must be host:port on loopback, such as 127.0.0.1:0: %w", address, err)
	}
	if !isLoopback(host) {
		return nil, fmt.Errorf("--address %q: must be a loopback address (127.0.0.1, [::1] or localhost): the dashboard reads with your credentials", address)
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", address, err)
	}
	return ln, nil
}

// isLoopback says whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withToken serves next under /<token>/ and answers 404 elsewhere,
// comparing the token in constant time.
func (s *Server) withToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, rest, found := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if subtle.ConstantTimeCompare([]byte(first), []byte(s.token)) != 1 {
			http.NotFound(w, r)
			return
		}
		if !found {
			http.Redirect(w, r, s.Path(), http.StatusFound)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = "/"+rest, ""
		next.ServeHTTP(w, r2)
	})
}

// loopbackHost refuses (403) a request whose Host is not a loopback name
// or address with the port it reached: what a DNS-rebound page sends.
func loopbackHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, port, err := net.SplitHostPort(r.Host)
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		ok := err == nil && isLoopback(host)
		if ok && local != nil {
			_, lport, err := net.SplitHostPort(local.String())
			ok = err == nil && lport == port
		}
		if !ok {
			http.Error(w, fmt.Sprintf("Host %q: the dashboard answers only its own loopback address", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// activity is Activity's source: cluster/audit's Handler over the
// namespace filter's recommendations (scopedReader).
type activity struct {
	reader client.Reader
	now    func() time.Time
	log    *slog.Logger
}

// Audit implements web.Source.
func (a *activity) Audit(ctx context.Context, query url.Values) (auditv1.Page, error) {
	h := &audit.Handler{Reader: scopedReader{Reader: a.reader, Namespace: query.Get("namespace")}, Now: a.now, Log: a.log}
	return h.Audit(ctx, query)
}

// narrowTo redirects Activity without a namespace filter to namespace's
// when the user may not list recommendations in every namespace (a
// RoleBinding of kerf-audit-reader). The filter then shows on the page,
// with the link that removes it, rather than narrowing it unsaid.
func narrowTo(c client.Reader, namespace string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if namespace == "" || q.Has("namespace") {
			next.ServeHTTP(w, r)
			return
		}
		var probe v1alpha1.RightsizingRecommendationList
		if err := c.List(r.Context(), &probe, client.Limit(1)); apierrors.IsForbidden(err) {
			q.Set("namespace", namespace)
			found(w, "?"+q.Encode())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// found redirects to location relative to the address the browser asked
// for. http.Redirect would resolve it against the path without the token.
func found(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusFound)
}

// savingsSource is Savings' source: cluster/pages' over the namespace
// filter's recommendations (scopedReader).
type savingsSource struct{ reader client.Reader }

// Savings implements web.SavingsSource.
func (s savingsSource) Savings(ctx context.Context, q webui.SavingsQuery) (webui.SavingsData, error) {
	src := &pages.Savings{Reader: scopedReader{Reader: s.reader, Namespace: q.Namespace}}
	return src.Savings(ctx, q)
}
