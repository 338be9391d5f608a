package hub_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProbesNeedNoTokenAndReadinessFollowsTheDatabase: /healthz answers
// while the process serves, /readyz only while the database does; neither
// needs a token (the kubelet has none).
func TestProbesNeedNoTokenAndReadinessFollowsTheDatabase(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, p := range []string{"/healthz", "/readyz"} {
			status, body := e.do(t, "GET", p, "", nil)
			assert.Equal(t, http.StatusOK, status, "%s: %s", p, body)
		}
		status, _ := e.do(t, "POST", "/readyz", "", nil)
		assert.Equal(t, http.StatusMethodNotAllowed, status)

		_ = e.store.Close() // the database is gone
		// The answer is given again for a second (one ping a second).
		var body []byte
		require.Eventually(t, func() bool {
			status, body = e.do(t, "GET", "/readyz", "", nil)
			return status == http.StatusServiceUnavailable
		}, 10*time.Second, 50*time.Millisecond, "still ready without a database")
		assert.JSONEq(t, `{"error": "database unavailable"}`, string(body))
		status, _ = e.do(t, "GET", "/healthz", "", nil)
		assert.Equal(t, http.StatusOK, status, "alive: a database outage must not restart the replicas")
	})
}

// TestAReadinessFloodCostsOnePingASecond is the attack of issue 30, item
// 4: /readyz is anonymous and exempt from the in-flight cap, and pinged
// the database for every request, so a flood of it (over HTTP/2, many
// at once) took PostgreSQL's connections. Now 400 probes at once cost one
// ping for each second they span, and all are answered ready.
func TestAReadinessFloodCostsOnePingASecond(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		pings := func() float64 {
			for _, line := range strings.Split(metrics(t, e), "\n") {
				if v, ok := strings.CutPrefix(line, "kerf_hub_readiness_pings_total "); ok {
					f, err := strconv.ParseFloat(v, 64)
					require.NoError(t, err)
					return f
				}
			}
			t.Fatal("no kerf_hub_readiness_pings_total in /metrics")
			return 0
		}
		before := pings()
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 400 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", e.url+"/readyz", nil)
				resp, err := e.client.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		n := pings() - before
		t.Logf("400 probes in %s: %.0f pings", took.Round(time.Millisecond), n)
		assert.Zero(t, failed.Load(), "every probe answered ready")
		assert.LessOrEqual(t, n, 1+took.Seconds()/readyForSeconds+1, "one ping a second at most")
	})
}

// readyForSeconds is the hub's readyFor (a second).
const readyForSeconds = 1.0
