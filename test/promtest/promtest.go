// Package promtest runs a real Prometheus (Debian's, installed by make
// deps) for tests: on a free loopback port, with a generated configuration
// that scrapes one target or several jobs.
package promtest

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/freeport"
)

// Binary is Debian's Prometheus.
const Binary = "/usr/bin/prometheus"

// NeedBinary skips t without Debian's Prometheus, or fails it where the
// real parts are required (make test).
func NeedBinary(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		msg := fmt.Sprintf("needs a real Prometheus at %s (make deps installs it): %v", Binary, err)
		if controlplane.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Start runs Prometheus scraping target (host:port, /metrics) every
// interval, as job kerf, and returns its URL once it is ready; it is
// killed when the test ends. Without the binary the test skips, or fails
// where the real parts are required (make test).
func Start(t testing.TB, target string, interval time.Duration) string {
	t.Helper()
	return StartJobs(t, interval, Job{Name: "kerf", Target: target})
}

// Job is one scrape job of the Prometheus StartJobs runs.
type Job struct {
	// Name is the job's name, its series' job label.
	Name string
	// Target is the scraped host:port (its /metrics).
	Target string
	// TokenFile, when set, holds the bearer token it scrapes with.
	TokenFile string
	// HonorLabels keeps the target's labels where they clash with
	// Prometheus' own.
	HonorLabels bool
	// Labels are added to every series of the job.
	Labels map[string]string
}

// StartJobs runs Prometheus scraping every job every interval and returns
// its URL once it is ready; it is killed when the test ends, and its
// output is logged when the test failed. Without the binary the test
// skips, or fails where the real parts are required (make test).
func StartJobs(t testing.TB, interval time.Duration, jobs ...Job) string {
	t.Helper()
	NeedBinary(t)
	dir := t.TempDir()
	every := fmt.Sprintf("%dms", interval.Milliseconds())
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %[1]s\n  scrape_timeout: %[1]s\nscrape_configs:\n", every)
	for _, j := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n", j.Name)
		if j.HonorLabels {
			cfg.WriteString("    honor_labels: true\n")
		}
		if j.TokenFile != "" {
			fmt.Fprintf(&cfg, "    authorization:\n      type: Bearer\n      credentials_file: %q\n", j.TokenFile)
		}
		fmt.Fprintf(&cfg, "    static_configs:\n      - targets: [%q]\n", j.Target)
		if len(j.Labels) > 0 {
			cfg.WriteString("        labels:\n")
			for _, k := range slices.Sorted(maps.Keys(j.Labels)) {
				fmt.Fprintf(&cfg, "          %s: %q\n", k, j.Labels[k])
			}
		}
	}
	file := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(file, []byte(cfg.String()), 0o600))
	addr := freeport.Addr(t)
	logFile := filepath.Join(dir, "prometheus.log")
	logs, err := os.Create(logFile)
	require.NoError(t, err)
	cmd := exec.Command(Binary, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logs.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logFile)
			t.Logf("prometheus output:\n%s", data)
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
