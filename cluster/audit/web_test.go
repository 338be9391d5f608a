package audit_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kerf-dev/kerf/test/browsertest"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/web"
)

// TestActivityPageInABrowser loads the Activity page over the leader's
// source (the informer cache of a real apiserver, the package's fixture) in
// headless Chromium: the page loads without console errors, shows the
// namespace's actions newest first, and its type filter link narrows them.
func TestActivityPageInABrowser(t *testing.T) {
	cp := controlplane.Get(t)
	settle(t, cp)
	src := audit.New(env.cache)
	src.Now = func() time.Time { return now }
	mux := http.NewServeMux()
	src.Register(mux)
	mux.Handle("GET /ui/activity", &web.Activity{Source: src, Refresh: time.Hour})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx, console := browsertest.Start(t, browsertest.Options{})
	page := srv.URL + "/ui/activity?" + url.Values{"namespace": {env.nsA}}.Encode()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible("tbody tr")))
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tbody tr td:last-child")].map(td => td.firstChild.textContent.trim())`))
	require.NoError(t, err)
	assert.Equal(t, keep(allNewestFirst, "web-memory 1", "web 4", "db 1", "web 3", "web 2", "web-memory 0", "db 0", "web 1", "web 0"), cells)
	browsertest.Screenshot(t, ctx, "web-activity.png", true)

	// The type link of the rollback narrows the page to rollbacks in the namespace.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("a.type-rolled_back"), chromedp.WaitVisible(`a[aria-label^="remove the filter type"]`)))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	u, err := url.Parse(loc)
	require.NoError(t, err)
	assert.Equal(t, url.Values{"namespace": {env.nsA}, "type": {"rolled_back"}}, u.Query(), "the filter is in the address, to bookmark")
	cells, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tbody tr td:last-child")].map(td => td.firstChild.textContent.trim())`))
	require.NoError(t, err)
	assert.Equal(t, []string{"web 1"}, cells)

	// At a phone's width the table fits: nothing scrolls sideways.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(page), chromedp.WaitVisible("tbody tr")))
	wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	require.NoError(t, err)
	assert.False(t, wide, "the page scrolls sideways at 390px")
	browsertest.Screenshot(t, ctx, "web-activity-phone.png", true)

	errs := console()
	assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
}
