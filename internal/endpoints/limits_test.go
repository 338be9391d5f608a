package endpoints

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveWithin serves a Server with limits l and extra handlers on
// loopback, and returns its address.
func serveWithin(t *testing.T, l Limits, extra map[string]http.Handler) string {
	t.Helper()
	s := New(prometheus.NewRegistry(), nil, WithLimits(l))
	for p, h := range extra {
		s.Mux().Handle(p, h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return ln.Addr().String()
}

// trickle writes head, then one byte of body every 100 ms for at most
// budget, and returns how long the server kept the connection open.
func trickle(t *testing.T, addr, head string, budget time.Duration) time.Duration {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = io.WriteString(conn, head)
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		// Whatever the server answers, the connection ends when it
		// closes it.
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

// TestSlowClientsAreCutOff: a client that never finishes its headers, and
// one that trickles its body, are cut off within the limits, not held for
// as long as they keep sending. Before Limits only the header timeout
// (10 s) was set: the trickled body held its connection until the client
// stopped (this test's 6 s budget).
func TestSlowClientsAreCutOff(t *testing.T) {
	l := DefaultLimits()
	l.ReadHeaderTimeout, l.ReadTimeout, l.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	addr := serveWithin(t, l, nil)
	const budget = 6 * time.Second
	headers := trickle(t, addr, "GET /metrics HTTP/1.1\r\nHost: kerf\r\nX-Slow: ", budget)
	assert.Less(t, headers, l.ReadHeaderTimeout+time.Second, "headers never finished: cut off at ReadHeaderTimeout")
	body := trickle(t, addr, "POST /metrics HTTP/1.1\r\nHost: kerf\r\nContent-Length: 100000\r\n\r\n", budget)
	assert.Less(t, body, l.ReadTimeout+time.Second, "body trickled: cut off at ReadTimeout")
	t.Logf("headers cut off after %v, body after %v", headers.Round(time.Millisecond), body.Round(time.Millisecond))
}

// TestIdleConnectionsAreClosed: a kept-alive connection with no request
// is closed at IdleTimeout. Before Limits it stayed open.
func TestIdleConnectionsAreClosed(t *testing.T) {
	l := DefaultLimits()
	l.IdleTimeout = time.Second
	addr := serveWithin(t, l, nil)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: kerf\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	start := time.Now()
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the server closed the idle connection (not our 5 s deadline)")
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestOversizedHeadersGet431: headers over MaxHeaderBytes are refused
// with 431. Before Limits Go's default (1 MiB) let 100 KiB through.
func TestOversizedHeadersGet431(t *testing.T) {
	addr := serveWithin(t, DefaultLimits(), nil)
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	req.Header.Set("X-Big", strings.Repeat("a", 8<<10)) // a large token, some cookies
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestOverTheInFlightCapGets503: with MaxInFlight requests held, one more
// gets 503 with Retry-After, while the probes still answer; once one ends,
// the next is served. Before Limits every request was served.
func TestOverTheInFlightCapGets503(t *testing.T) {
	l := DefaultLimits()
	l.MaxInFlight = 3
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	addr := serveWithin(t, l, map[string]http.Handler{"GET /slow": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprintln(w, "done")
	})})
	get := func(path string) (*http.Response, error) {
		return (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + path)
	}
	done := make(chan error, l.MaxInFlight)
	for range l.MaxInFlight {
		go func() {
			resp, err := get("/slow")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
			done <- err
		}()
	}
	for range l.MaxInFlight {
		<-entered
	}
	resp, err := get("/slow")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "one over the cap")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	resp, err = get("/metrics")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "every route but the probes shares the cap")
	for _, probe := range []string{"/healthz", "/readyz"} {
		resp, err := get(probe)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s answers the kubelet whatever the load", probe)
	}
	close(release)
	for range l.MaxInFlight {
		require.NoError(t, <-done)
	}
	resp, err = get("/metrics")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "served again once under the cap")
}
