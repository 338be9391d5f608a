package hub_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub"
)

// page is a request to the hub's pages.
type page struct {
	method, path string
	bearer       string // a token for Authorization: Bearer
	cookie       string // a session secret
	origin       string // the Origin header; "self" is the hub's own
	form         url.Values
}

type answer struct {
	status int
	body   string
	header http.Header
	cookie *http.Cookie // the session cookie set, if any
}

// ask sends p without following redirects.
func (e *env) ask(t *testing.T, p page) answer {
	t.Helper()
	var body io.Reader
	if p.form != nil {
		body = strings.NewReader(p.form.Encode())
	}
	if p.method == "" {
		p.method = "GET"
	}
	req, err := http.NewRequest(p.method, e.url+p.path, body)
	require.NoError(t, err)
	if p.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if p.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+p.bearer)
	}
	if p.cookie != "" {
		req.AddCookie(&http.Cookie{Name: hub.SessionCookie, Value: p.cookie})
	}
	switch p.origin {
	case "":
	case "self":
		req.Header.Set("Origin", e.url)
	default:
		req.Header.Set("Origin", p.origin)
	}
	c := *e.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, body: string(b), header: resp.Header}
	for _, ck := range resp.Cookies() {
		if ck.Name == hub.SessionCookie {
			a.cookie = ck
		}
	}
	return a
}

// signIn posts the token through the form and returns the session cookie.
func (e *env) signIn(t *testing.T, token string) *http.Cookie {
	t.Helper()
	a := e.ask(t, page{method: "POST", path: "/ui/signin", origin: "self", form: url.Values{"token": {token}, "next": {"/ui/activity?cluster=east"}}})
	require.Equal(t, http.StatusSeeOther, a.status, a.body)
	assert.Equal(t, "/ui/activity?cluster=east", a.header.Get("Location"))
	require.NotNil(t, a.cookie)
	return a.cookie
}

var uiPages = []string{"/ui/fleet", "/ui/activity", "/ui/activity?cluster=east&type=rolled_back"}

func TestPagesNeedTheAPIsReadAccess(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, p := range uiPages {
			t.Run(p, func(t *testing.T) {
				a := e.ask(t, page{path: p})
				assert.Equal(t, http.StatusUnauthorized, a.status, "no credentials")
				assert.Contains(t, a.body, `<form class="signin" method="post" action="/ui/signin">`, "the sign-in form")
				assert.Contains(t, a.body, `name="next" value="`+strings.ReplaceAll(p, "&", "&amp;")+`"`, "back to this page after")
				assert.Equal(t, `Bearer realm="kerf-hub"`, a.header.Get("WWW-Authenticate"))
				assert.Equal(t, "text/html; charset=utf-8", a.header.Get("Content-Type"))

				a = e.ask(t, page{path: p, bearer: e.tokens["reader"]})
				assert.Equal(t, http.StatusOK, a.status, "the read token (an auth proxy's header)")
				assert.Equal(t, "no-store", a.header.Get("Cache-Control"))

				a = e.ask(t, page{path: p, bearer: e.tokens["east"]})
				assert.Equal(t, http.StatusForbidden, a.status, "a cluster's token only writes")
				assert.Contains(t, a.body, "A cluster token only writes")

				a = e.ask(t, page{path: p, bearer: "kerf_0123456789abcdef_forged"})
				assert.Equal(t, http.StatusUnauthorized, a.status, "a forged token")
				a = e.ask(t, page{path: p, cookie: "not-a-session"})
				assert.Equal(t, http.StatusUnauthorized, a.status, "a made-up session")
			})
		}
	})
}

func TestSignInStartsASessionAndSignOutEndsIt(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ck := e.signIn(t, e.tokens["reader"])
		assert.True(t, ck.HttpOnly)
		assert.True(t, ck.Secure)
		assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		assert.Equal(t, "/", ck.Path)
		assert.Equal(t, int(hub.SessionTTL/time.Second), ck.MaxAge)
		assert.NotContains(t, ck.Value, strings.TrimPrefix(e.tokens["reader"], "kerf_")[17:], "the cookie is not the token")
		for _, p := range uiPages {
			assert.Equal(t, http.StatusOK, e.ask(t, page{path: p, cookie: ck.Value}).status, p)
		}
		// Signing out from another site is refused and ends nothing.
		a := e.ask(t, page{method: "POST", path: "/ui/signout", cookie: ck.Value, origin: "https://evil.example"})
		assert.Equal(t, http.StatusForbidden, a.status)
		assert.Equal(t, http.StatusOK, e.ask(t, page{path: "/ui/fleet", cookie: ck.Value}).status)

		a = e.ask(t, page{method: "POST", path: "/ui/signout", cookie: ck.Value, origin: "self"})
		assert.Equal(t, http.StatusSeeOther, a.status)
		assert.Equal(t, "/ui/signin?signedout=1", a.header.Get("Location"))
		require.NotNil(t, a.cookie)
		assert.Equal(t, -1, a.cookie.MaxAge, "the cookie is cleared")
		assert.Equal(t, http.StatusUnauthorized, e.ask(t, page{path: "/ui/fleet", cookie: ck.Value}).status, "the session ended on the server: an old cookie is worthless")

		// A revoked token's sessions end at once.
		ck = e.signIn(t, e.tokens["reader"])
		tokens, err := e.store.Tokens(t.Context())
		require.NoError(t, err)
		for _, tk := range tokens {
			if tk.Name == "ops" {
				require.NoError(t, e.store.RevokeToken(t.Context(), tk.ID))
			}
		}
		assert.Equal(t, http.StatusUnauthorized, e.ask(t, page{path: "/ui/fleet", cookie: ck.Value}).status)
	})
}

func TestSignInRefusesClusterTokensBadTokensAndOtherOrigins(t *testing.T) {
	e := newEnv(t, "sqlite")
	form := func(tok string) url.Values { return url.Values{"token": {tok}} }
	for _, tc := range []struct {
		name   string
		p      page
		status int
		msg    string
	}{
		{"a cluster's token", page{form: form(e.tokens["east"]), origin: "self"}, http.StatusForbidden, "A cluster token only writes"},
		{"a wrong token", page{form: form("kerf_0123456789abcdef_nope"), origin: "self"}, http.StatusUnauthorized, "not a valid token"},
		{"no token", page{form: url.Values{}, origin: "self"}, http.StatusUnauthorized, "not a valid token"},
		{"another site's form", page{form: form(e.tokens["reader"]), origin: "https://evil.example"}, http.StatusForbidden, "not from this hub"},
		{"no Origin", page{form: form(e.tokens["reader"])}, http.StatusForbidden, "not from this hub"},
		{"a null Origin", page{form: form(e.tokens["reader"]), origin: "null"}, http.StatusForbidden, "not from this hub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.method, tc.p.path = "POST", "/ui/signin"
			a := e.ask(t, tc.p)
			assert.Equal(t, tc.status, a.status, a.body)
			assert.Contains(t, a.body, tc.msg)
			assert.Nil(t, a.cookie, "no session")
		})
	}
	// The token never goes into an address: the form posts it.
	a := e.ask(t, page{path: "/ui/signin"})
	assert.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, a.body, `method="post"`)
	assert.Contains(t, a.body, `type="password"`)
	assert.Contains(t, a.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
}

func TestSignInGoesBackOnlyToTheHubsOwnPages(t *testing.T) {
	e := newEnv(t, "sqlite")
	for next, want := range map[string]string{
		"/ui/activity?type=applied": "/ui/activity?type=applied",
		"https://evil.example/ui/":  "/ui/fleet",
		"//evil.example/ui/fleet":   "/ui/fleet",
		"/\\evil.example":           "/ui/fleet",
		"/v1/audit":                 "/ui/fleet",
		"/ui/signout":               "/ui/fleet",
		"":                          "/ui/fleet",
	} {
		a := e.ask(t, page{method: "POST", path: "/ui/signin", origin: "self", form: url.Values{"token": {e.tokens["reader"]}, "next": {next}}})
		require.Equal(t, http.StatusSeeOther, a.status, next)
		assert.Equal(t, want, a.header.Get("Location"), next)
	}
}

func TestHubActivityHasTheClusterColumnAndFilter(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.write(t, "east", action("shop", "web", 1, v1alpha1.ActionRolledBack, "OOMKills", 1, v1alpha1.ResourceMemory))
		e.write(t, "west", action("shop", "db", 1, v1alpha1.ActionApplied, "InPlace", 2, v1alpha1.ResourceCPU))
		a := e.ask(t, page{path: "/ui/activity", bearer: e.tokens["reader"]})
		require.Equal(t, http.StatusOK, a.status, a.body)
		assert.Contains(t, a.body, `<th scope="col">Cluster</th>`)
		assert.Contains(t, a.body, `<a href="?cluster=west">west</a>`, "the cluster filter")
		assert.Contains(t, a.body, "rolled_back OOMKills of shop/web #1")
		assert.Contains(t, a.body, "applied InPlace of shop/db #1")

		a = e.ask(t, page{path: "/ui/activity?cluster=east", bearer: e.tokens["reader"]})
		require.Equal(t, http.StatusOK, a.status, a.body)
		assert.Contains(t, a.body, "rolled_back OOMKills of shop/web #1")
		assert.NotContains(t, a.body, "applied InPlace of shop/db #1", "the filter narrows to east")
		assert.Contains(t, a.body, `aria-label="remove the filter cluster = east"`)

		a = e.ask(t, page{path: "/ui/activity?cluster=Not_A_Name", bearer: e.tokens["reader"]})
		assert.Equal(t, http.StatusBadRequest, a.status)
		assert.Contains(t, a.body, "The filter cluster is not valid")
		a = e.ask(t, page{path: "/ui/activity?bogus=1", bearer: e.tokens["reader"]})
		assert.Equal(t, http.StatusBadRequest, a.status, "the API's own checks")
	})
}

func TestHubFleetListsClustersWithContactLagAndRollbacks(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		now := time.Date(2030, 3, 1, 12, 30, 0, 0, time.UTC)
		e.now = now
		e.store.Now = func() time.Time { return now.Add(-2 * time.Minute) }
		e.write(t, "east",
			action("shop", "web", 1, v1alpha1.ActionRolledBack, "OOMKills", 1, v1alpha1.ResourceMemory),
			action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 2, v1alpha1.ResourceMemory),
			action("shop", "web", 3, v1alpha1.ActionApplied, "InPlace", 3, v1alpha1.ResourceMemory))
		a := e.ask(t, page{path: "/ui/fleet", bearer: e.tokens["reader"]})
		require.Equal(t, http.StatusOK, a.status, a.body)
		body := a.body
		assert.Contains(t, body, `<a href="activity?cluster=east" aria-label="east: its actions">east</a>`)
		assert.Contains(t, body, `<time datetime="2030-03-01T12:28:00Z">2030-03-01 12:28:00</time><br><span>2m ago</span>`)
		assert.Contains(t, body, `<td data-label="Agents connected" class="num">3</td>`)
		assert.Contains(t, body, `<td data-label="Delivery lag">2s</td>`, "lagSeconds 1.5, rounded")
		assert.Contains(t, body, `<td data-label="Actions, 24 h" class="num">3</td>`)
		assert.Contains(t, body, `aria-label="east: 2 rollbacks in 24 hours">2</a>`)
		assert.Regexp(t, regexp.MustCompile(`(?s)west.*<span class="muted">never</span>`), body, "west never wrote")
		assert.Contains(t, body, `<svg role="img" aria-label="east: 2 rollbacks in the last 7 days (UTC), at most 2 in one hour"`)
		assert.Equal(t, 1, strings.Count(body, "<rect "), "one bar: both rollbacks in the 12:00 hour")
		assert.Contains(t, body, "1 cluster had none.")
		assert.Contains(t, body, `<rect x="156.10" y="2.00" width="0.8" height="38.00"><title>east: 2 from Fri 1 Mar 12:00</title></rect>`, "hour 12 of the last day")
		assert.Contains(t, body, `<li title="Sat 23 Feb">Sat 23</li><li title="Sun 24 Feb">Sun 24</li><li title="Mon 25 Feb">Mon 25</li><li title="Tue 26 Feb">Tue 26</li><li title="Wed 27 Feb">Wed 27</li><li title="Thu 28 Feb">Thu 28</li><li title="Fri 1 Mar">Fri 1</li></ol>`, "calendar days, today last")
		assert.Contains(t, body, `<tr><th scope="row">east</th><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">2</td><td class="num">2</td></tr>`, "the table fallback")
		assert.Contains(t, body, `<form method="post" action="/ui/signout">`)
	})
}

func TestUIRoutesRefuseOtherMethods(t *testing.T) {
	e := newEnv(t, "sqlite")
	for _, p := range []page{{method: "POST", path: "/ui/fleet"}, {method: "DELETE", path: "/ui/activity"}, {method: "GET", path: "/ui/signout"}} {
		a := e.ask(t, p)
		assert.Equal(t, http.StatusMethodNotAllowed, a.status, p.path)
	}
	a := e.ask(t, page{path: "/ui/"})
	assert.Equal(t, http.StatusSeeOther, a.status)
	assert.Equal(t, "/ui/fleet", a.header.Get("Location"))
}

func TestHubWorkloadPageShowsTheHistoryWithTheAPIsAccess(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.write(t, "east",
			action("shop", "web", 1, v1alpha1.ActionApplied, "InPlace", 1, v1alpha1.ResourceMemory),
			action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 5, v1alpha1.ResourceMemory))
		e.write(t, "west", action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 2, v1alpha1.ResourceCPU))
		const path = "/ui/workloads/east/shop/web"
		assert.Equal(t, http.StatusUnauthorized, e.ask(t, page{path: path}).status)
		assert.Equal(t, http.StatusForbidden, e.ask(t, page{path: path, bearer: e.tokens["east"]}).status)
		a := e.ask(t, page{path: path, bearer: e.tokens["reader"]})
		require.Equal(t, http.StatusOK, a.status, a.body)
		assert.Contains(t, a.body, "rolled_back OOMKills of shop/web #2")
		assert.Contains(t, a.body, "applied InPlace of shop/web #1")
		assert.NotContains(t, a.body, "applied Rollout of shop/web #1", "west's web is another workload")
		assert.Contains(t, a.body, "This page is the hub's", "the hub says it keeps the actions, not the values in force")
		assert.NotContains(t, a.body, "Not made by Kerf's recommender", "the hub does not know who made it")

		a = e.ask(t, page{path: "/ui/workloads/east/shop/nope", bearer: e.tokens["reader"]})
		assert.Equal(t, http.StatusNotFound, a.status)

		// Activity links each action to its cluster's workload page.
		a = e.ask(t, page{path: "/ui/activity", bearer: e.tokens["reader"]})
		assert.Contains(t, a.body, `<a href="workloads/east/shop/web">`)
		assert.Contains(t, a.body, `<a href="workloads/west/shop/web">`)
	})
}
