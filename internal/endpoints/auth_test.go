package endpoints

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/internal/authn"
	"github.com/kerf-dev/kerf/test/authtest"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/memtest"
)

func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

// serveAuthorized serves a registry with kerf_test_total on /metrics
// behind an Authenticator of cp's apiserver, as the agent and the leader
// do.
func serveAuthorized(t *testing.T, cp *controlplane.ControlPlane, cfg authn.Config) string {
	return serveAuthorizedBy(t, cp.Config, cfg)
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

// TestAKnownTokenGetsThroughAFloodOfNewOnes scrapes /metrics with a
// reader's token, then floods the server from 96 connections with tokens
// it has never seen, at the agent's review rate (5 a second), and moves
// the clock past the reader's cached answer. Every scrape of the reader
// during the flood must succeed: its token is known, so its new review
// and its request have budgets of their own. Before, the flood held all
// 64 request slots and queued ahead of the reader's review behind one
// rate limiter: the reader got 503s. The heap after the flood is logged
// and bounded.
func TestAKnownTokenGetsThroughAFloodOfNewOnes(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	reader := authtest.NewCaller(t, cp, controlplane.UniqueName("lanes"), "prometheus")
	reader.BindCluster(t, cp, authtest.MetricsReader)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	rc := rest.CopyConfig(cp.Config)
	rc.QPS, rc.Burst = 5, 10 // client-go's defaults, the agent's
	base := serveAuthorizedBy(t, rc, authn.Config{Now: now})

	code, body := authtest.Get(t, base+"/metrics", reader.Token)
	require.Equal(t, http.StatusOK, code, body)
	heapBefore, rssBefore := memtest.Now(t)

	transport := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 96}
	defer transport.CloseIdleConnections()
	flooder := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var answered, shed atomic.Int64
	for g := range 96 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
				req.Header.Set("Authorization", fmt.Sprintf("Bearer never-seen-%d-%d", g, i))
				resp, err := flooder.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answered.Add(1)
				if resp.StatusCode == http.StatusServiceUnavailable {
					shed.Add(1)
				}
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	require.Eventually(t, func() bool { return shed.Load() >= 100 }, time.Minute, 10*time.Millisecond,
		"the flood fills the new callers' budget")
	offset.Store(int64(2 * authn.DefaultAllowTTL)) // the reader's cached answer has expired

	for i := range 10 {
		code, body := authtest.Get(t, base+"/metrics", reader.Token)
		require.Equal(t, http.StatusOK, code, "scrape %d during the flood: %s", i, body)
	}
	stop()
	wg.Wait()
	heapAfter, rssAfter := memtest.Now(t)
	t.Logf("flood: %d answers, %d shed with 503; heap %d → %d KiB, RSS %d → %d KiB",
		answered.Load(), shed.Load(), heapBefore>>10, heapAfter>>10, rssBefore>>10, rssAfter>>10)
	assert.Less(t, heapAfter, heapBefore+32<<20, "the flood leaves at most the bounded caches behind")
}

// serveAuthorizedBy is serveAuthorized with the server's own apiserver
// configuration (its rate limit).
func serveAuthorizedBy(t *testing.T, rc *rest.Config, cfg authn.Config) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_test_total", Help: "A test counter."}))
	cfg.REST = rc
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

// TestATokenOfKerfsAudienceIsAccepted: a server with OwnAudience (the
// agent and the leader) takes a token minted for Kerf's audience, which
// the apiserver itself refuses, as well as the apiserver's; a token for
// another audience (the agents' stream tokens among them) or a forged one
// claiming Kerf's is refused. Before, only apiserver tokens worked, so
// every token sent to Kerf could be replayed against the apiserver.
func TestATokenOfKerfsAudienceIsAccepted(t *testing.T) {
	cp := controlplane.Get(t)
	authtest.InstallReaderRoles(t, cp)
	reader := authtest.NewCaller(t, cp, controlplane.UniqueName("audience"), "prometheus")
	reader.BindCluster(t, cp, authtest.MetricsReader)
	base := serveAuthorized(t, cp, authn.Config{OwnAudience: authn.Audience})
	tokenFor := func(audience string) string {
		tr, err := cp.Clientset.CoreV1().ServiceAccounts(reader.Namespace).CreateToken(context.Background(), reader.Name,
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	kerfToken := tokenFor(authn.Audience)

	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"a token of Kerf's audience", kerfToken, http.StatusOK},
		{"an apiserver token", reader.Token, http.StatusOK},
		{"a token of another audience", tokenFor("elsewhere"), http.StatusUnauthorized},
		{"an agent's stream token", tokenFor("kerf-leader"), http.StatusUnauthorized},
		{"a forged JWT claiming Kerf's audience", "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsia2VyZiJdLCJzdWIiOiJ4In0.c2ln", http.StatusUnauthorized},
	} {
		code, body := authtest.Get(t, base+"/metrics", c.token)
		assert.Equal(t, c.want, code, "%s: %s", c.name, body)
	}

	// The apiserver does not take the Kerf token: read off a Kerf server,
	// it opens nothing else.
	review, err := cp.Clientset.AuthenticationV1().TokenReviews().Create(context.Background(),
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: kerfToken}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.False(t, review.Status.Authenticated, "the apiserver refuses a token of Kerf's audience for itself")
}
