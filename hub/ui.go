package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/endpoints"
	"github.com/kerf-dev/kerf/web"
)

// The pages' addresses (docs/hub.md, "The pages").
const (
	uiFleet    = "/ui/fleet"
	uiActivity = "/ui/activity"
	uiWorkload = "/ui/workloads/{cluster}/{namespace}/{name}"
	uiSignIn   = "/ui/signin"
	// signInReadTimeout bounds the read of a sign-in's body.
	signInReadTimeout = 5 * time.Second
	uiSignOut         = "/ui/signout"
)

// SessionCookie names the sign-in session's cookie. The __Host- prefix makes
// the browser refuse it unless it is Secure, for the whole host and for no
// other domain.
const SessionCookie = "__Host-kerf-hub-session"

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 12 * time.Hour

// chartHours is the rollback chart's window, in one-hour buckets.
const chartHours = 7 * 24

// maxSignInBody bounds the sign-in form's body.
const maxSignInBody = 4 << 10

// MaxSignInsInFlight bounds the sign-in requests (the form and its post)
// served at once; one more gets 503 with Retry-After. It is apart from the
// server's cap of 64, which anonymous trickled posts could fill.
const MaxSignInsInFlight = 8

// mountUI adds the web pages to the hub's routes: the Fleet, Activity,
// Savings and workload pages behind the same read access as the API, and the sign-in
// form.
func (s *Server) mountUI(mux *http.ServeMux) {
	src := uiSource{s}
	mux.Handle("GET "+uiFleet, s.page(&web.Fleet{Source: src, ActivityPath: "activity", SignOut: uiSignOut, Refresh: time.Minute, Log: s.log()}))
	mux.Handle("GET "+uiActivity, s.page(&web.Activity{Source: src, Refresh: 30 * time.Second, Log: s.log()}))
	mux.Handle("GET "+uiSavings, s.page(&web.Savings{Source: src, Refresh: time.Minute, Now: s.now, Log: s.log()}))
	mux.Handle("GET "+uiWorkload, s.page(&web.WorkloadPage{Source: src, Refresh: 30 * time.Second, ActivityHref: uiActivity, Now: s.now, Log: s.log()}))
	// The sign-in form is the one route anyone may use before they
	// authenticate, and its post carries a body: it has a budget of its
	// own (Serve exempts it from the server's cap), so that trickled
	// sign-ins cannot take the slots of callers with a token.
	signIn := http.NewServeMux()
	signIn.HandleFunc("GET "+uiSignIn, s.serveSignInForm)
	signIn.HandleFunc("POST "+uiSignIn, s.serveSignIn)
	limited := endpoints.InFlight(signIn, MaxSignInsInFlight, time.Second)
	mux.Handle("GET "+uiSignIn, limited)
	mux.Handle("POST "+uiSignIn, limited)
	mux.HandleFunc("POST "+uiSignOut, s.serveSignOut)
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, uiFleet, http.StatusSeeOther) })
	for _, p := range []string{uiFleet, uiActivity, uiSavings, uiWorkload, "/ui/{$}"} {
		mux.HandleFunc(p, methodNotAllowed("GET, HEAD"))
	}
	mux.HandleFunc(uiSignIn, methodNotAllowed("GET, HEAD, POST"))
	mux.HandleFunc(uiSignOut, methodNotAllowed("POST"))
}

// Parameter names the query parameter at fault, for the web pages.
func (e *paramError) Parameter() string { return e.param }

// uiSource reads the pages' content from the hub's database.
type uiSource struct{ s *Server }

// Audit answers the Activity page as GET /v1/audit does (the same
// parameters, cluster included).
func (u uiSource) Audit(ctx context.Context, query url.Values) (auditv1.Page, error) {
	page, err := u.AuditClusters(ctx, query)
	out := auditv1.Page{Continue: page.Continue, Items: make([]auditv1.Entry, len(page.Items))}
	for i, e := range page.Items {
		out.Items[i] = e.Entry
	}
	return out, err
}

// AuditClusters is Audit with each action's cluster and every registered
// cluster, for the page's cluster column and filter.
func (u uiSource) AuditClusters(ctx context.Context, query url.Values) (web.ClusterPage, error) {
	aq, err := u.s.parseAudit(query.Encode())
	if err != nil {
		return web.ClusterPage{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	items, next, err := u.s.Store.Actions(ctx, aq)
	if err != nil {
		return web.ClusterPage{}, err
	}
	cs, err := u.s.Store.Clusters(ctx)
	if err != nil {
		return web.ClusterPage{}, err
	}
	page := web.ClusterPage{Continue: actionContinue(next)}
	for _, c := range cs {
		page.Clusters = append(page.Clusters, c.Name)
	}
	for _, e := range items {
		page.Items = append(page.Items, web.ClusterEntry{Cluster: e.Cluster, Entry: e.Entry})
	}
	return page, nil
}

// Fleet reads the clusters, their last day's actions, their rollbacks
// per hour over the last 7 days (UTC), today included, and their Savings
// page's figures summed: saved, and the reported recommended and pending.
func (u uiSource) Fleet(ctx context.Context) (web.FleetData, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	now := u.s.now().UTC()
	cs, err := u.s.Store.Clusters(ctx)
	if err != nil {
		return web.FleetData{}, err
	}
	// The last 24 hours: one bucket per cluster and type.
	day, _, err := u.s.Store.ActionBuckets(ctx, store.BucketQuery{Start: now.Add(-24 * time.Hour), Step: 24 * time.Hour, Buckets: 1, Limit: (len(cs) + 1) * 8})
	if err != nil {
		return web.FleetData{}, err
	}
	counts := map[string][2]int64{}
	for _, b := range day {
		c := counts[b.Cluster]
		c[0] += b.Count
		if b.Type == v1alpha1.ActionRolledBack {
			c[1] += b.Count
		}
		counts[b.Cluster] = c
	}
	// The chart: the last 7 days (UTC), today included, whole days so
	// that its columns are calendar days; today's later hours are empty.
	end := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).Add(24 * time.Hour)
	series := web.Series{Start: end.Add(-chartHours * time.Hour), Step: time.Hour, Buckets: chartHours, Counts: map[string][]int64{}}
	rows, more, err := u.s.Store.ActionBuckets(ctx, store.BucketQuery{
		Types: []v1alpha1.ActionType{v1alpha1.ActionRolledBack}, Start: series.Start, Step: series.Step, Buckets: series.Buckets,
		// Enough rows for MaxChartClusters clusters whole, and one more.
		Limit: (web.MaxChartClusters + 1) * chartHours,
	})
	if err != nil {
		return web.FleetData{}, err
	}
	if more && len(rows) > 0 {
		// The last cluster's rows may be cut short: leave it out.
		last := rows[len(rows)-1].Cluster
		for len(rows) > 0 && rows[len(rows)-1].Cluster == last {
			rows = rows[:len(rows)-1]
		}
		series.Truncated = true
	}
	for _, b := range rows {
		if b.Index < 0 || b.Index >= series.Buckets {
			continue
		}
		if series.Counts[b.Cluster] == nil {
			series.Counts[b.Cluster] = make([]int64, series.Buckets)
		}
		series.Counts[b.Cluster][b.Index] += b.Count
	}
	// What each cluster's stored changes saved, as its Savings page sums.
	sv, err := u.Savings(ctx, web.SavingsQuery{From: now.Add(-24 * time.Hour), To: now})
	if err != nil {
		return web.FleetData{}, err
	}
	saved, recommended, pending := map[string]web.Amounts{}, map[string]web.Amounts{}, map[string]web.Amounts{}
	reported := map[string]web.SavingsRow{}
	for _, r := range sv.Rows {
		saved[r.Cluster] = plus(saved[r.Cluster], r.Manifest, r.InForce)
		if r.Reported.IsZero() {
			continue
		}
		recommended[r.Cluster] = plus(recommended[r.Cluster], r.Recommended, web.Amounts{})
		pending[r.Cluster] = plus(pending[r.Cluster], r.InForce, r.Recommended)
		reported[r.Cluster] = r
	}
	data := web.FleetData{Now: now, Rollbacks: series}
	for _, c := range cs {
		fc := web.FleetCluster{Name: c.Name, Actions: counts[c.Name][0], Rollbacks: counts[c.Name][1]}
		if c.LastContact != nil {
			fc.LastContact = c.LastContact.Time
		}
		if c.RemovedAt != nil {
			fc.Removed = c.RemovedAt.Time
		}
		if c.Leader != nil {
			fc.Reported = true
			fc.Leader = c.Leader.Identity
			fc.AgentsConnected = c.Leader.AgentsConnected
			fc.Undelivered = c.Leader.Undelivered
			fc.Lag = time.Duration(c.Leader.LagSeconds * float64(time.Second))
		}
		if a, ok := saved[c.Name]; ok {
			fc.Saved = &a
		}
		if r, ok := reported[c.Name]; ok {
			rec, pend := recommended[c.Name], pending[c.Name]
			fc.Recommended, fc.Pending = &rec, &pend
			fc.SavingsReported, fc.SavingsStale = r.Reported, r.Stale
		}
		data.Clusters = append(data.Clusters, fc)
	}
	return data, nil
}

// errNoCredentials is a page asked for with neither a bearer token nor a
// session cookie.
var errNoCredentials = errors.New("no credentials")

// pageCaller authenticates a page's request: the Authorization bearer
// token (an auth proxy's, or a script's) if there is one, else the
// session cookie.
func (s *Server) pageCaller(r *http.Request) (store.Token, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || strings.TrimSpace(token) == "" {
			return store.Token{}, store.ErrBadToken
		}
		return s.Store.Authenticate(ctx, strings.TrimSpace(token))
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return store.Token{}, errNoCredentials
	}
	return s.Store.SessionToken(ctx, c.Value)
}

// page lets a read token through to a page, as reader does for the API;
// anyone else gets the sign-in form: 401 without valid credentials, 403
// with a cluster's token.
func (s *Server) page(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		t, err := s.pageCaller(r)
		form := web.SignInForm{Action: uiSignIn, Next: r.URL.RequestURI(), Session: SessionTTL}
		switch {
		case errors.Is(err, errNoCredentials):
			form.Error = "Sign in to see this page."
		case errors.Is(err, store.ErrBadToken):
			form.Error = "The token or the session is not valid (revoked, expired or mistyped). Sign in again."
			clearSession(w)
		case err != nil:
			s.failedPage(w, r, err)
			return
		case t.Kind != store.ReaderToken:
			form.Error = "A cluster token only writes; reading the pages needs a read token (kerf-hub tokens add-reader)."
			web.WriteSignIn(w, http.StatusForbidden, form, s.log())
			return
		default:
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="kerf-hub"`)
		web.WriteSignIn(w, http.StatusUnauthorized, form, s.log())
	})
}

func (s *Server) failedPage(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	s.log().Error("hub page failed", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, "internal error; the hub logged it", http.StatusInternalServerError)
}

// serveSignInForm answers GET /ui/signin: the form alone.
func (s *Server) serveSignInForm(w http.ResponseWriter, r *http.Request) {
	form := web.SignInForm{Action: uiSignIn, Next: nextPage(r.URL.Query().Get("next")), Session: SessionTTL}
	if r.URL.Query().Get("signedout") != "" {
		form.Error = "You are signed out."
	}
	web.WriteSignIn(w, http.StatusOK, form, s.log())
}

// serveSignIn answers POST /ui/signin: a read token, posted once, starts a
// session whose secret the browser keeps in a cookie.
func (s *Server) serveSignIn(w http.ResponseWriter, r *http.Request) {
	if !s.sameOrigin(w, r) {
		return
	}
	// A sign-in's body is a token: read within signInReadTimeout, not the
	// server's minute for a leader's batch.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(signInReadTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBody)
	form := web.SignInForm{Action: uiSignIn, Session: SessionTTL}
	if err := r.ParseForm(); err != nil {
		form.Error = fmt.Sprintf("The form cannot be read: %v.", err)
		web.WriteSignIn(w, http.StatusBadRequest, form, s.log())
		return
	}
	form.Next = nextPage(r.PostForm.Get("next"))
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	t, err := s.Store.Authenticate(ctx, strings.TrimSpace(r.PostForm.Get("token")))
	switch {
	case errors.Is(err, store.ErrBadToken):
		s.log().Info("page sign-in refused", "reason", "invalid token", "remote", r.RemoteAddr)
		form.Error = "That is not a valid token of this hub."
		web.WriteSignIn(w, http.StatusUnauthorized, form, s.log())
		return
	case err != nil:
		s.failedPage(w, r, err)
		return
	case t.Kind != store.ReaderToken:
		s.log().Info("page sign-in refused", "reason", "cluster token", "tokenId", t.ID, "remote", r.RemoteAddr)
		form.Error = "A cluster token only writes; reading the pages needs a read token (kerf-hub tokens add-reader)."
		web.WriteSignIn(w, http.StatusForbidden, form, s.log())
		return
	}
	secret, err := s.Store.NewSession(ctx, t.ID, SessionTTL)
	if err != nil {
		s.failedPage(w, r, err)
		return
	}
	s.log().Info("page sign-in", "tokenId", t.ID, "tokenName", t.Name, "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: secret, Path: "/", MaxAge: int(SessionTTL / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, form.Next, http.StatusSeeOther)
}

// serveSignOut answers POST /ui/signout: the session ends on the server,
// and the cookie is cleared.
func (s *Server) serveSignOut(w http.ResponseWriter, r *http.Request) {
	if !s.sameOrigin(w, r) {
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := s.Store.EndSession(ctx, c.Value); err != nil {
			s.failedPage(w, r, err)
			return
		}
	}
	clearSession(w)
	http.Redirect(w, r, uiSignIn+"?signedout=1", http.StatusSeeOther)
}

func clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// sameOrigin refuses (403) a form post from another origin. The cookie's
// SameSite=Strict already keeps it off cross-site requests; checking Origin
// also stops a cross-site sign-in (into the attacker's session). A post
// without Origin is accepted only when the browser says it is same-origin
// (Sec-Fetch-Site); curl has no business posting the form.
func (s *Server) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	want := scheme + "://" + r.Host
	origin := r.Header.Get("Origin")
	if origin == want || (origin == "" && r.Header.Get("Sec-Fetch-Site") == "same-origin") {
		return true
	}
	s.log().Info("page form refused", "reason", "cross-origin", "origin", origin, "want", want, "remote", r.RemoteAddr)
	w.Header().Set("Cache-Control", "no-store")
	web.WriteSignIn(w, http.StatusForbidden, web.SignInForm{Action: uiSignIn, Next: uiFleet, Session: SessionTTL,
		Error: fmt.Sprintf("The form was posted from %q, not from this hub (%s): refused.", origin, want)}, s.log())
	return false
}

// nextPage is where a sign-in goes back to: a page of the hub's own, never
// another site (an open redirect).
func nextPage(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/ui/") ||
		strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") || u.Path == uiSignIn || u.Path == uiSignOut {
		return uiFleet
	}
	return u.RequestURI()
}

// plus is sum + (a − b).
func plus(sum, a, b web.Amounts) web.Amounts {
	return web.Amounts{CPUMillis: sum.CPUMillis + a.CPUMillis - b.CPUMillis, MemoryBytes: sum.MemoryBytes + a.MemoryBytes - b.MemoryBytes}
}
