package promtest

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cadvisor's names of the CFS counters (cluster/promql reads them; this
// package cannot import it: promql's own tests import this one).
const (
	periodsMetric   = "container_cpu_cfs_periods_total"
	throttledMetric = "container_cpu_cfs_throttled_periods_total"
)

// CadvisorTarget serves cadvisor's CFS counters of one container, as a
// kubelet's /metrics/cadvisor would, for Start's Prometheus to scrape.
type CadvisorTarget struct {
	// Addr is the host:port to scrape.
	Addr string
	// Periods and Throttled are the counters served; zero until set.
	Periods, Throttled        atomic.Int64
	namespace, pod, container string
}

// NewCadvisorTarget serves the counters of the container in the pod of
// namespace on loopback until the test ends.
func NewCadvisorTarget(t testing.TB, namespace, pod, container string) *CadvisorTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ct := &CadvisorTarget{Addr: ln.Addr().String(), namespace: namespace, pod: pod, container: container}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		labels := fmt.Sprintf(`{namespace=%q,pod=%q,container=%q}`, ct.namespace, ct.pod, ct.container)
		fmt.Fprintf(w, "# TYPE %s counter\n%s%s %d\n# TYPE %s counter\n%s%s %d\n",
			periodsMetric, periodsMetric, labels, ct.Periods.Load(),
			throttledMetric, throttledMetric, labels, ct.Throttled.Load())
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ct
}
