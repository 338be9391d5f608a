package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestDashboardPrintsItsAddressAndServesUntilStopped runs kubectl kerf
// dashboard --open in-process with the control plane's kubeconfig: it
// prints a loopback address with a path token, hands it to xdg-open (a
// script on PATH here), the Activity page answers there, and the command
// ends without an error when its context does (Ctrl-C).
func TestDashboardPrintsItsAddressAndServesUntilStopped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the fake browser is an xdg-open script")
	}
	cp := controlplane.Get(t)
	bin := t.TempDir()
	opened := filepath.Join(bin, "opened")
	require.NoError(t, os.WriteFile(filepath.Join(bin, "xdg-open"), []byte("#!/bin/sh\necho \"$1\" > "+opened+"\n"), 0o755))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, w := io.Pipe()
	var errOut strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- execute(ctx, []string{"--kubeconfig", cp.Kubeconfig, "dashboard", "--open"},
			genericiooptions.IOStreams{In: strings.NewReader(""), Out: w, ErrOut: &errOut}, clock)
		w.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the first line")
	m := regexp.MustCompile(`: (http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{22}/ui/activity)\n$`).FindStringSubmatch(line)
	require.NotNil(t, m, "the address, with a 128-bit token: %q", line)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(opened)
		return err == nil && strings.TrimSpace(string(b)) == m[1]
	}, 30*time.Second, 20*time.Millisecond, "xdg-open started on the address")
	resp, err := http.Get(m[1])
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "<h1>Activity</h1>")
	cancel()
	assert.Equal(t, 0, <-code, errOut.String())
}

func TestDashboardRefusesAnAddressOffLoopback(t *testing.T) {
	cp := controlplane.Get(t)
	code, _, errOut := kerf(t, cp, "dashboard", "--address", "0.0.0.0:8080")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `error: --address "0.0.0.0:8080": must be a loopback address (127.0.0.1, [::1] or localhost)`)
}
