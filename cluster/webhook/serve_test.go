package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/internal/endpoints"
)

// limitedWebhook is the webhook's real TLS listener, requiring the
// apiserver's client certificate, served within limits.
type limitedWebhook struct {
	addr string
	// servingCA is the PEM of the CA of the webhook's serving certificate.
	servingCA []byte
	// client is the apiserver's TLS config: its client certificate, the
	// serving CA trusted.
	client *tls.Config
}

// serveWebhookWithin serves the webhook's mux with handler on Path, the
// client-certificate auth of ClientAuth.ServerTLS and limits l.
func serveWebhookWithin(t *testing.T, l endpoints.Limits, handler http.Handler) *limitedWebhook {
	t.Helper()
	serving := newTestCA(t, "serving")
	clients := newTestCA(t, "clients")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, clients.pem, 0o600))
	base := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving.issue(t, "webhook", true)}}
	cfg, err := ClientAuth{CAFile: caFile, Names: []string{DefaultClientName}}.ServerTLS(base, testLogger(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListenerWithin(ctx, ln, cfg, Mux(handler), l) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(serving.pem)
	apiserver := clients.issue(t, DefaultClientName, false)
	return &limitedWebhook{addr: ln.Addr().String(), servingCA: serving.pem,
		client: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{apiserver}}}
}

// dial opens a TLS connection as the apiserver, handshake done.
func (w *limitedWebhook) dial(t *testing.T) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", w.addr, w.client)
	require.NoError(t, err, "the apiserver's certificate gets in")
	require.NoError(t, conn.Handshake())
	return conn
}

// do sends req as the apiserver on a connection of its own.
func (w *limitedWebhook) do(req *http.Request) (*http.Response, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: w.client, DisableKeepAlives: true}}
	return hc.Do(req)
}

// trickleTLS writes head as the apiserver, then one byte every 100 ms for
// at most budget, and returns how long the webhook kept the connection.
func (w *limitedWebhook) trickle(t *testing.T, head string, budget time.Duration) time.Duration {
	t.Helper()
	conn := w.dial(t)
	defer conn.Close()
	start := time.Now()
	_, err := io.WriteString(conn, head)
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < budget {
		select {
		case <-closed:
			return time.Since(start)
		case <-tick.C:
			if _, err := conn.Write([]byte("x")); err != nil {
				<-closed
				return time.Since(start)
			}
		}
	}
	return time.Since(start)
}

// TestWebhookCutsOffSlowClients: over the webhook's TLS listener, with the
// apiserver's client certificate, a caller that never finishes its
// headers and one that trickles its body are cut off at the Limits'
// ReadHeaderTimeout and ReadTimeout. Before the webhook was on Limits its
// own fixed timeouts (10 s, 30 s) held both for this test's whole 6 s.
func TestWebhookCutsOffSlowClients(t *testing.T) {
	l := endpoints.DefaultLimits()
	l.ReadHeaderTimeout, l.ReadTimeout, l.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	w := serveWebhookWithin(t, l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	const budget = 6 * time.Second
	headers := w.trickle(t, "POST "+Path+" HTTP/1.1\r\nHost: kerf\r\nX-Slow: ", budget)
	assert.Less(t, headers, l.ReadHeaderTimeout+time.Second, "headers never finished: cut off at ReadHeaderTimeout")
	body := w.trickle(t, "POST "+Path+" HTTP/1.1\r\nHost: kerf\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", budget)
	assert.Less(t, body, l.ReadTimeout+time.Second, "body trickled: cut off at ReadTimeout")
	t.Logf("headers cut off after %v, body after %v", headers.Round(time.Millisecond), body.Round(time.Millisecond))
}

// TestWebhookClosesIdleConnections: the apiserver's kept-alive connection
// with no request is closed at the Limits' IdleTimeout (before: the
// webhook's own 90 s).
func TestWebhookClosesIdleConnections(t *testing.T) {
	l := endpoints.DefaultLimits()
	l.IdleTimeout = time.Second
	w := serveWebhookWithin(t, l, http.NotFoundHandler())
	conn := w.dial(t)
	defer conn.Close()
	_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: kerf\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	start := time.Now()
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the webhook closed the idle connection (not our 5 s deadline)")
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestWebhookOversizedHeadersGet431: a review whose headers pass
// MaxHeaderBytes (64 KiB) gets 431 and never reaches the injector, one
// with 8 KiB of headers does. Before the webhook was on Limits Go's
// default (1 MiB) let 100 KiB through to the injector.
func TestWebhookOversizedHeadersGet431(t *testing.T) {
	var reached atomic.Int32
	w := serveWebhookWithin(t, endpoints.DefaultLimits(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	send := func(header int) int {
		req, err := http.NewRequest(http.MethodPost, "https://"+w.addr+Path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("X-Big", strings.Repeat("a", header))
		resp, err := w.do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, send(100<<10))
	assert.Zero(t, reached.Load(), "the injector never saw the oversized review")
	assert.Equal(t, http.StatusNoContent, send(8<<10))
	assert.Equal(t, int32(1), reached.Load())
}

// TestWebhookOverTheInFlightCapGets503: with MaxInFlight reviews held in
// the injector, one more from the apiserver gets 503 with Retry-After
// (the apiserver applies the webhook's failurePolicy, Ignore), /healthz
// still answers; once one ends the next review is served. A caller
// without the apiserver's certificate is still refused at the handshake.
// Before the webhook was on Limits every review was served at once.
func TestWebhookOverTheInFlightCapGets503(t *testing.T) {
	l := endpoints.DefaultLimits()
	l.MaxInFlight = 3
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	w := serveWebhookWithin(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	review := func(path string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, "https://"+w.addr+path, strings.NewReader("{}"))
		if err != nil {
			return nil, err
		}
		return w.do(req)
	}
	done := make(chan error, l.MaxInFlight)
	for range l.MaxInFlight {
		go func() {
			resp, err := review(Path)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = errors.New(resp.Status)
				}
			}
			done <- err
		}()
	}
	for range l.MaxInFlight {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the held reviews never reached the injector")
		}
	}
	resp, err := review(Path)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "one over the cap")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	resp, err = review(healthPath)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "/healthz answers whatever the load")

	_, _, err = post(w.addr, w.servingCA, nil, []byte("{}"))
	require.Error(t, err, "without the apiserver's certificate, refused")
	assert.Contains(t, err.Error(), "tls", "refused at the handshake")

	close(release)
	for range l.MaxInFlight {
		require.NoError(t, <-done)
	}
	resp, err = review(Path)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "served again once under the cap")
}
