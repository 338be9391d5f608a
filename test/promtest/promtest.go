// Package promtest runs a real Prometheus (Debian's, installed by make
// deps) for tests: on a free loopback port, with a generated configuration
// that scrapes one target.
package promtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// Binary is Debian's Prometheus.
const Binary = "/usr/bin/prometheus"

// Start runs Prometheus scraping target (host:port, /metrics) every
// interval and returns its URL once it is ready; it is killed when the test
// ends. Without the binary the test skips, or fails where the real parts
// are required (make test).
func Start(t testing.TB, target string, interval time.Duration) string {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		msg := fmt.Sprintf("needs a real Prometheus at %s (make deps installs it): %v", Binary, err)
		if controlplane.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	every := fmt.Sprintf("%dms", interval.Milliseconds())
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: kerf
    static_configs:
      - targets: [%[2]q]
`, every, target), 0o600))
	addr := FreeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(Binary,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready after 15s: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a port free at the time.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
