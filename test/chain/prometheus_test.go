package chain

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
)

// prometheusBin is Debian's Prometheus (make deps installs it).
const prometheusBin = "/usr/bin/prometheus"

// startPrometheus runs the real Prometheus on a free loopback port,
// scraping target's /metrics every interval, and returns its URL once it
// is ready; it is killed when the test ends.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: kerf-agent
    static_configs:
      - targets: [%[2]q]
`, model(interval), target), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	var logs bytes.Buffer
	cmd := exec.Command(prometheusBin,
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

// model writes d as a Prometheus duration in milliseconds.
func model(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
