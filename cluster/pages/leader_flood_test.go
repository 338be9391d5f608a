package pages_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
	"github.com/kerf-dev/kerf/test/memtest"
)

// TestAnAuditReaderGetsThroughAFloodOfStrangersAndCallersWithoutRights
// serves a leader's endpoints over TLS, as kerf-leader does, on its
// default apiserver rate (50 a second), and floods them from 96
// connections with tokens never seen, from 96 more with the valid token
// of a caller bound to nothing, who asks a new namespace at every request
// (each a SubjectAccessReview), and from 96 more with a metrics reader's
// token (a stolen Prometheus token), known to the server since it
// scraped /metrics, asking the same of the audit API and the pages. A
// reader bound to kerf-audit-reader in its namespace reads the Activity
// page, the audit API and the workload page meanwhile: every read must
// succeed. Before, a valid token was known whatever its rights, so the
// caller without rights held the known callers' 64 slots waiting on its
// reviews and the reader got 503 at its first read; and a known caller
// could hold all 64 (the metrics reader did) until each caller got a
// share of them. The heap and the RSS before and after are logged, and
// the heap is bounded.
func TestAnAuditReaderGetsThroughAFloodOfStrangersAndCallersWithoutRights(t *testing.T) {
	cp := controlplane.Get(t)
	c := cp.Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	base, tlsConfig := leaderEndpoints(t, ns)
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)

	authtest.InstallReaderRoles(t, cp)
	reader := authtest.NewCaller(t, cp, ns, "auditor")
	reader.BindNamespace(t, cp, authtest.AuditReader, ns)
	nobody := authtest.NewCaller(t, cp, ns, "nobody")
	scraper := authtest.NewCaller(t, cp, ns, "prometheus")
	scraper.BindCluster(t, cp, authtest.MetricsReader)

	readerClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig.Clone()}}
	pages := []string{"/ui/activity?namespace=" + ns, "/v1/audit?namespace=" + ns, "/ui/workloads/" + ns + "/web"}
	readAs := func(token, path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := readerClient.Do(req)
		require.NoError(t, err, "GET %s", path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	read := func(path string) (int, string) { return readAs(reader.Token, path) }
	require.Eventually(t, func() bool {
		code, body := read(pages[0])
		return code == http.StatusOK && strings.Contains(body, v1alpha1.ReasonNoPolicy)
	}, 30*time.Second, 100*time.Millisecond, "the Activity page shows the blocked action")
	for _, p := range pages {
		code, body := read(p)
		require.Equal(t, http.StatusOK, code, "%s before the flood: %s", p, body)
	}
	code, body := readAs(scraper.Token, "/metrics")
	require.Equal(t, http.StatusOK, code, "the metrics reader scrapes, and is known: %.200s", body)
	warm := time.Now()
	heapBefore, rssBefore := memtest.Now(t)
	goroutines := runtime.NumGoroutine()

	// The two floods, each on its own 96 connections.
	type flood struct {
		name     string
		client   *http.Client
		answered atomic.Int64
		shed     atomic.Int64 // 503
		refused  atomic.Int64 // 401, 403, or an empty list
	}
	newFlood := func(name string) *flood {
		tr := &http.Transport{TLSClientConfig: tlsConfig.Clone(), MaxIdleConnsPerHost: 96}
		t.Cleanup(tr.CloseIdleConnections)
		return &flood{name: name, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	}
	strangers, withoutRights, known := newFlood("never-seen tokens"), newFlood("a caller without rights"), newFlood("a known metrics reader")
	fctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	send := func(f *flood, path, token string) {
		req, _ := http.NewRequestWithContext(fctx, http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := f.client.Do(req)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		f.answered.Add(1)
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			f.shed.Add(1)
		case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
			f.refused.Add(1)
		case resp.StatusCode == http.StatusOK && path == "/v1/audit" && !strings.Contains(string(b), ns):
			// A list across namespaces leaves out those the caller
			// may not read: every one here.
			f.refused.Add(1)
		default:
			t.Errorf("%s got %d for %s: %.200s", f.name, resp.StatusCode, path, b)
		}
	}
	for g := range 96 {
		wg.Go(func() {
			for i := 0; fctx.Err() == nil; i++ {
				send(strangers, pages[i%len(pages)], fmt.Sprintf("never-seen-%d-%d", g, i))
			}
		})
		wg.Go(func() {
			for i := 0; fctx.Err() == nil; i++ {
				other := fmt.Sprintf("flood-%d-%d", g, i)
				path := []string{"/ui/activity?namespace=" + other, "/v1/audit?namespace=" + other, "/ui/workloads/" + other + "/web", "/v1/audit"}[i%4]
				send(withoutRights, path, nobody.Token)
			}
		})
		wg.Go(func() {
			for i := 0; fctx.Err() == nil; i++ {
				other := fmt.Sprintf("known-%d-%d", g, i)
				path := []string{"/ui/activity?namespace=" + other, "/v1/audit?namespace=" + other, "/ui/workloads/" + other + "/web", "/v1/audit"}[i%4]
				send(known, path, scraper.Token)
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	// Under the race detector on a loaded machine each of the 288
	// connections' handshakes is slow (a 503 closes its connection): the
	// wait is for a few of each, for up to two minutes.
	floodsOn := func() bool {
		return strangers.shed.Load() >= 20 && withoutRights.refused.Load() >= 20 && known.shed.Load() >= 20
	}
	if !assert.Eventually(t, floodsOn, 2*time.Minute, 10*time.Millisecond) {
		t.Fatalf("the floods are not on: %d of the new callers shed (503), %d refusals of the caller without rights, %d of the metrics reader shed",
			strangers.shed.Load(), withoutRights.refused.Load(), known.shed.Load())
	}

	// Ten rounds, and on until the reader's cached refusal across
	// namespaces (it is bound in ns alone) has expired and been asked
	// again during the flood.
	reads := 0
	for i := 0; i < 10 || time.Since(warm) < authn.DefaultDenyTTL+time.Second; i++ {
		for _, p := range pages {
			code, body := read(p)
			require.Equal(t, http.StatusOK, code, "read %d of %s during the flood: %s", i, p, body)
			reads++
		}
	}
	stop()
	wg.Wait()
	strangers.client.CloseIdleConnections()
	withoutRights.client.CloseIdleConnections()
	known.client.CloseIdleConnections()
	readerClient.CloseIdleConnections()
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+8 }, time.Minute, 10*time.Millisecond,
		"the server lets go of the floods' connections")
	heapAfter, rssAfter := memtest.Now(t)
	for _, f := range []*flood{strangers, withoutRights, known} {
		t.Logf("%s: %d answers, %d shed with 503, %d refused (401, 403, an empty list)", f.name, f.answered.Load(), f.shed.Load(), f.refused.Load())
	}
	t.Logf("the reader: %d reads during the floods, all 200", reads)
	t.Logf("heap %d → %d KiB, RSS %d → %d KiB", heapBefore>>10, heapAfter>>10, rssBefore>>10, rssAfter>>10)
	assert.Less(t, heapAfter, heapBefore+32<<20, "the floods leave at most the bounded caches behind")
}

// leaderEndpoints starts a leader in ns whose endpoints (metrics, audit
// API, pages) serve HTTPS with the stream's certificate, as kerf-leader
// --metrics-tls does, on kerf-leader's default apiserver rate. It
// returns their base URL and a TLS configuration that verifies them.
func leaderEndpoints(t *testing.T, ns string) (string, *tls.Config) {
	t.Helper()
	cp := controlplane.Get(t)
	serverCert, pool := kubetest.StreamCert(t, cp.Client, ns)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rc := rest.CopyConfig(cp.Config)
	rc.QPS, rc.Burst = 50, 100 // kerf-leader's --kube-api-qps and --kube-api-burst
	// kerf-leader's lease timings: the floods share the test's two cores
	// with the leader, whose renewals the short timings of the other
	// tests could miss.
	leadertest.StartReplicaOn(t, rc, ns, "a", cluster.Config{Listener: lis, ListenerCert: &serverCert,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second})
	return "https://" + lis.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "kerf-leader." + ns + ".svc", MinVersion: tls.VersionTLS12}
}
