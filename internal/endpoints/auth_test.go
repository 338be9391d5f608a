package endpoints

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// serveAuthorized serves reg's /metrics behind an Authenticator of cp's
// apiserver, as the agent and the leader do.
func serveAuthorized(t *testing.T, cp *controlplane.ControlPlane, cfg authn.Config) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	cfg.REST = cp.Config
	a, err := authn.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- New(reg, nil, MetricsAuthorizedBy(a)).ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return "http://" + ln.Addr().String()
}

// TestMetricsAskTheCallersToken checks /metrics against real tokens on a
// real apiserver: none and a bad one get 401, one without RBAC 403, one
// bound to kerf-metrics-reader the metrics; the probes stay open. Before
// MetricsAuthorizedBy every caller got the metrics.
func TestMetricsAskTheCallersToken(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	ns := controlplane.UniqueName("metrics")
	reader := authtest.NewCaller(t, cp, ns, "prometheus")
	reader.BindCluster(t, cp, authtest.MetricsReader)
	nobody := authtest.NewCaller(t, cp, ns, "nobody")
	auditor := authtest.NewCaller(t, cp, ns, "auditor")
	auditor.BindCluster(t, cp, authtest.AuditReader)
	base := serveAuthorized(t, cp, authn.Config{})

	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a bad token", "not-a-token", http.StatusUnauthorized},
		{"a forged JWT", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06YWRtaW4ifQ.c2ln", http.StatusUnauthorized},
		{"a token without RBAC", nobody.Token, http.StatusForbidden},
		{"an audit reader's token", auditor.Token, http.StatusForbidden},
		{"a metrics reader's token", reader.Token, http.StatusOK},
	} {
		code, body := authtest.Get(t, base+"/metrics", c.token)
		assert.Equal(t, c.want, code, "%s: %s", c.name, body)
		if c.want == http.StatusOK {
			assert.Contains(t, body, "kerf_test_total 0")
		} else {
			assert.NotContains(t, body, "kerf_test_total")
		}
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		code, _ := authtest.Get(t, base+probe, "")
		assert.Equal(t, http.StatusOK, code, "%s answers the kubelet without a token", probe)
	}
}

// TestBadTokensAreRememberedNotReviewedAgain sends 200 requests with one
// bad token, 50 at a time, and counts the TokenReviews the apiserver
// answered: one (the negative cache and the one review in flight per
// token), not 200. Then 200 with a good token: one review too. Before the
// caches every request made its own review.
func TestBadTokensAreRememberedNotReviewedAgain(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	reader := authtest.NewCaller(t, cp, controlplane.UniqueName("flood"), "prometheus")
	reader.BindCluster(t, cp, authtest.MetricsReader)
	base := serveAuthorized(t, cp, authn.Config{MaxEntries: 16})

	flood := func(token string, want int) int {
		before := authtest.TokenReviews(t, cp)
		var wg sync.WaitGroup
		codes := make(chan int, 200)
		for range 4 {
			wg.Go(func() {
				for range 50 {
					req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
					req.Header.Set("Authorization", "Bearer "+token)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						codes <- 0
						continue
					}
					_ = resp.Body.Close()
					codes <- resp.StatusCode
				}
			})
		}
		wg.Wait()
		close(codes)
		for c := range codes {
			require.Equal(t, want, c)
		}
		return authtest.TokenReviews(t, cp) - before
	}
	bad := flood("a-bad-token", http.StatusUnauthorized)
	good := flood(reader.Token, http.StatusOK)
	t.Logf("TokenReviews for 200 requests: %d with a bad token, %d with a good one", bad, good)
	assert.LessOrEqual(t, bad, 4, "a bad token is reviewed once, then remembered")
	assert.LessOrEqual(t, good, 4, "a good token is reviewed once, then remembered")
}
