package audit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/web"
)

// browser starts headless Chromium (Debian's chromium, hack/apt.sh) and
// collects what the pages write to the console. Without chromium the test
// skips, or fails where a skip would hide it (KERF_REQUIRE_CONTROLPLANE=1,
// CI=true).
func browser(t *testing.T) (context.Context, func() []chromedp.ConsoleMessage) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("KERF_REQUIRE_CONTROLPLANE") == "1" || os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed (hack/apt.sh installs it): %v", err)
		}
		t.Skipf("chromium is not installed (hack/apt.sh installs it): %v", err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	var mu sync.Mutex
	var msgs []chromedp.ConsoleMessage
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		}
	}()
	return ctx, func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		return append([]chromedp.ConsoleMessage(nil), msgs...)
	}
}

// screenshot saves the page as name under the test's artifact directory
// (go test -artifacts keeps it) and, with KERF_UPDATE_SCREENSHOTS=1, as
// docs/name too.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot %s", name)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), name), png, 0o644))
	if os.Getenv("KERF_UPDATE_SCREENSHOTS") == "1" {
		root, err := kube.RepoRoot()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, "docs", name), png, 0o644))
	}
}

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

	ctx, console := browser(t)
	page := srv.URL + "/ui/activity?" + url.Values{"namespace": {env.nsA}}.Encode()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible("tbody tr")))
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tbody tr td:last-child")].map(td => td.firstChild.textContent.trim())`))
	require.NoError(t, err)
	assert.Equal(t, keep(allNewestFirst, "web-memory 1", "web 4", "db 1", "web 3", "web 2", "web-memory 0", "db 0", "web 1", "web 0"), cells)
	screenshot(t, ctx, "web-activity.png")

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
	screenshot(t, ctx, "web-activity-phone.png")

	var errs []string
	for _, m := range console() {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
			errs = append(errs, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
		}
	}
	assert.Empty(t, errs, "console:\n%s", strings.Join(errs, "\n"))
}
