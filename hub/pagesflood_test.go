package hub_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/test/memtest"
)

// TestASignedInReaderGetsThroughAFloodOfStrangers floods kerf-hub serve
// (its real limits, TLS, SQLite and PostgreSQL) with what anyone may send
// the pages, from 96 HTTP/1.1 connections and 160 HTTP/2 streams: no
// credentials, made-up session cookies, made-up tokens of the hub's shape
// (each a database lookup), sign-ins with them, 100 KiB headers; and 32
// connections trickle their headers until the server cuts them. A reader
// signed in through the form reads the Fleet, Activity and workload pages
// meanwhile: every read must succeed, and a new sign-in must get in. The
// heap and the RSS before and after are logged, and the heap is bounded.
func TestASignedInReaderGetsThroughAFloodOfStrangers(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { floodThePages(t, backend) })
	}
}

func floodThePages(t *testing.T, backend string) {
	base, client, tokens := servedHubOn(t, backend)
	now := time.Now().UTC()
	postBatch(t, base, client, tokens["east"], batch("east", shopActions("east", now, 3, 4)...))
	cookie := signInThroughTheForm(t, base, client, tokens["reader"])
	pages := []string{"/ui/fleet", "/ui/activity", "/ui/activity?cluster=east&type=rolled_back", "/ui/workloads/east/shop/web"}
	read := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.AddCookie(cookie)
		resp, err := client.Do(req)
		require.NoError(t, err, "GET %s", path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, p := range pages {
		code, body := read(p)
		require.Equal(t, http.StatusOK, code, "%s before the flood: %s", p, body)
	}
	heapBefore, rssBefore := memtest.Now(t)
	goroutines := runtime.NumGoroutine()

	u, err := url.Parse(base)
	require.NoError(t, err)
	tlsConfig := client.Transport.(*http.Transport).TLSClientConfig
	// 96 connections of HTTP/1.1, and 160 streams at once on HTTP/2.
	h1 := &http.Transport{TLSClientConfig: tlsConfig.Clone(), MaxIdleConnsPerHost: 96}
	h2 := &http.Transport{TLSClientConfig: tlsConfig.Clone(), ForceAttemptHTTP2: true}
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	flooders := []*http.Client{
		{Transport: h1, Timeout: 30 * time.Second, CheckRedirect: noRedirect},
		{Transport: h2, Timeout: 30 * time.Second, CheckRedirect: noRedirect},
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var answered, shed, shedSignIns, refused, oversized, trickledCut atomic.Int64
	big := strings.Repeat("x", 100<<10)
	for g := range 96 + 160 {
		flooder := flooders[min(g/96, 1)]
		wg.Go(func() {
			for ctx.Err() == nil {
				req := strangersRequest(ctx, base, g, big)
				resp, err := flooder.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answered.Add(1)
				switch resp.StatusCode {
				case http.StatusServiceUnavailable:
					if req.URL.Path == "/ui/signin" {
						shedSignIns.Add(1)
					} else {
						shed.Add(1)
					}
				case http.StatusRequestHeaderFieldsTooLarge:
					oversized.Add(1)
				case http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
					refused.Add(1)
				default:
					t.Errorf("a stranger got %d for %s %s", resp.StatusCode, req.Method, req.URL.Path)
				}
			}
		})
	}
	var trickling atomic.Int64
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if trickleHeaders(ctx, u.Host, tlsConfig, &trickling) {
					trickledCut.Add(1)
				}
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	require.Eventually(t, func() bool {
		return answered.Load() >= 2000 && trickledCut.Load() >= 32 && trickling.Load() >= 32
	}, time.Minute, 10*time.Millisecond, "the flood is on: every trickle cut once (ReadHeaderTimeout) and connected again")

	for i := range 10 {
		for _, p := range pages {
			code, body := read(p)
			require.Equal(t, http.StatusOK, code, "read %d of %s during the flood: %s", i, p, body)
		}
	}
	// A new sign-in competes with the flood's for the sign-in budget.
	signIns := 0
	for {
		signIns++
		if code := trySignIn(t, base, client, tokens["reader"]); code == http.StatusSeeOther {
			break
		} else {
			require.Equal(t, http.StatusServiceUnavailable, code, "a sign-in during the flood")
			require.Less(t, signIns, 200, "a sign-in gets in within 200 tries")
		}
	}
	stop()
	wg.Wait()
	h1.CloseIdleConnections()
	h2.CloseIdleConnections()
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+8 }, time.Minute, 10*time.Millisecond,
		"the server lets go of the flood's connections")
	heapAfter, rssAfter := memtest.Now(t)
	t.Logf("a new sign-in during the flood took %d tries", signIns)
	t.Logf("flood: %d answers, %d shed with 503 (%d sign-ins), %d refused (401, 403, 400), %d oversized (431), %d trickled headers cut; heap %d → %d KiB, RSS %d → %d KiB",
		answered.Load(), shed.Load()+shedSignIns.Load(), shedSignIns.Load(), refused.Load(), oversized.Load(), trickledCut.Load(), heapBefore>>10, heapAfter>>10, rssBefore>>10, rssAfter>>10)
	assert.Less(t, heapAfter, heapBefore+32<<20, "the flood leaves nothing but bounded state behind")
}

// strangersRequest is flooder g's next request: no credentials, a made-up
// session, a made-up token of the hub's shape (its id is looked up), a
// sign-in with one, or 100 KiB of headers.
func strangersRequest(ctx context.Context, base string, g int, big string) *http.Request {
	madeUp := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return b64(b)
	}
	token := func() string {
		id := make([]byte, 8)
		_, _ = rand.Read(id)
		return "kerf_" + hex.EncodeToString(id) + "_" + madeUp(32)
	}
	var req *http.Request
	switch g % 5 {
	case 0:
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/fleet", nil)
	case 1:
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/activity", nil)
		req.AddCookie(&http.Cookie{Name: hub.SessionCookie, Value: madeUp(32)})
	case 2:
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/workloads/east/shop/web", nil)
		req.Header.Set("Authorization", "Bearer "+token())
	case 3:
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/ui/signin", strings.NewReader(url.Values{"token": {token()}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
	case 4:
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/fleet", nil)
		req.AddCookie(&http.Cookie{Name: hub.SessionCookie, Value: big})
	}
	return req
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// trickleHeaders opens a TLS connection and sends a request's headers a
// byte every 200 ms, never ending them, until the server closes the
// connection (true) or ctx ends (false). trickling counts the ones
// connected.
func trickleHeaders(ctx context.Context, host string, tlsConfig *tls.Config, trickling *atomic.Int64) bool {
	d := tls.Dialer{Config: tlsConfig}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer conn.Close()
	trickling.Add(1)
	defer trickling.Add(-1)
	stopped := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stopped()
	if _, err := fmt.Fprintf(conn, "GET /ui/fleet HTTP/1.1\r\nHost: %s\r\nCookie: ", host); err != nil {
		return ctx.Err() == nil
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			return ctx.Err() == nil
		case <-ctx.Done():
			return false
		case <-tick.C:
			if _, err := conn.Write([]byte("a")); err != nil {
				<-closed
				return ctx.Err() == nil
			}
		}
	}
}

// servedHubOn runs kerf-hub serve on backend (a self-signed certificate,
// the server's real limits) until the test ends, with clusters east and
// west and a read token.
func servedHubOn(t *testing.T, backend string) (base string, client *http.Client, tokens map[string]string) {
	t.Helper()
	st, dsn := openStoreDSN(t, backend)
	ctx, cancel := context.WithCancel(context.Background())
	tokens = map[string]string{}
	var err error
	for _, c := range []string{"east", "west"} {
		tokens[c], err = st.AddCluster(ctx, c)
		require.NoError(t, err)
	}
	tokens["reader"], err = st.AddReader(ctx, "ops")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	certFile := filepath.Join(t.TempDir(), "hub.crt")
	go func() {
		done <- hub.Serve(ctx, hub.Config{Listen: "127.0.0.1:0", Database: dsn, SelfSignedCertOut: certFile, SelfSignedHosts: []string{"127.0.0.1"},
			Retention: 400 * 24 * time.Hour, RetentionEvery: time.Hour, MaxBodyBytes: hubv1.DefaultMaxBodyBytes,
			Ready: func(a net.Addr) { ready <- a }}, quiet)
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	select {
	case a := <-ready:
		base = "https://" + a.String()
	case err := <-done:
		t.Fatalf("kerf-hub serve: %v", err)
	}
	return base, trustingClient(t, certFile), tokens
}

// postBatch writes b as the cluster token and requires a 200.
func postBatch(t *testing.T, base string, client *http.Client, token string, b hubv1.Batch) {
	t.Helper()
	writeAs(t, client, http.MethodPost, base+"/v1/clusters/"+b.Cluster+"/actions", token, b)
}

// postSignIn posts token to the sign-in form once, as a browser does,
// without following the redirect.
func postSignIn(t *testing.T, base string, client *http.Client, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/ui/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	return resp
}

// signInThroughTheForm posts token to the sign-in form, as a browser
// does, and returns the session cookie.
func signInThroughTheForm(t *testing.T, base string, client *http.Client, token string) *http.Cookie {
	t.Helper()
	resp := postSignIn(t, base, client, token)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, string(body))
	for _, ck := range resp.Cookies() {
		if ck.Name == hub.SessionCookie {
			return ck
		}
	}
	t.Fatal("the sign-in set no session cookie")
	return nil
}

// trySignIn posts token to the sign-in form once and returns the status.
func trySignIn(t *testing.T, base string, client *http.Client, token string) int {
	t.Helper()
	resp := postSignIn(t, base, client, token)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
