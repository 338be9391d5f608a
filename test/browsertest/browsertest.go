// Package browsertest runs the pages' tests in a real browser: headless
// Chromium (Debian's chromium, hack/apt.sh) driven by chromedp, with what
// the pages write to the console collected and the screenshots saved.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/kube"
)

// Options change the browser Start starts.
type Options struct {
	// IgnoreCertErrors trusts any certificate (a server's self-signed one).
	IgnoreCertErrors bool
}

// Start starts headless Chromium at 1280 × 900 for the test, stopped when
// it ends, and returns its context and a function that lists the console's
// errors, exceptions and warnings so far ("type: text (url)"). Without
// chromium the test skips, or fails where a skip would hide it
// (KERF_REQUIRE_CONTROLPLANE=1, CI=true).
func Start(t *testing.T, opts Options) (context.Context, func() []string) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("KERF_REQUIRE_CONTROLPLANE") == "1" || os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed (hack/apt.sh installs it): %v", err)
		}
		t.Skipf("chromium is not installed (hack/apt.sh installs it): %v", err)
	}
	flags := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	}
	if opts.IgnoreCertErrors {
		flags = append(flags, chromedp.IgnoreCertErrors)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser before listening to its console: listening first
	// can hang the first navigation.
	require.NoError(t, chromedp.Do(ctx))
	var mu sync.Mutex
	var problems []string
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// Screenshot saves the whole page as name under the test's artifact
// directory (go test -artifacts keeps it) and, when inDocs and
// KERF_UPDATE_SCREENSHOTS=1, in docs/ too.
func Screenshot(t *testing.T, ctx context.Context, name string, inDocs bool) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot %s", name)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), name), png, 0o644))
	if inDocs && os.Getenv("KERF_UPDATE_SCREENSHOTS") == "1" {
		root, err := kube.RepoRoot()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, "docs", name), png, 0o644))
	}
}
