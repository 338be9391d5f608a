package endpoints

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestEndpointsServeMetricsHealthAndReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- New(reg, ready.Load).ServeListener(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	code, body := get(t, base+"/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "kerf_test_total 3")

	code, _ = get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)

	code, _ = get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "not ready until ready() says so")
	ready.Store(true)
	code, _ = get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)

	cancel()
	require.NoError(t, <-errc, "a cancelled context shuts the server down cleanly")
}

// TestUncompressedIgnoresAcceptEncoding asks for gzip: the default server
// compresses /metrics, one made with Uncompressed does not.
func TestUncompressedIgnoresAcceptEncoding(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "kerf_test_total", Help: "A test counter."}))
	for _, tc := range []struct {
		name     string
		opts     []Option
		encoding string
	}{
		{"default", nil, "gzip"},
		{"uncompressed", []Option{Uncompressed()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- New(reg, nil, tc.opts...).ServeListener(ctx, ln) }()
			defer func() {
				cancel()
				require.NoError(t, <-errc)
			}()
			req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/metrics", nil)
			require.NoError(t, err)
			// Set by hand, the transport leaves the body as sent.
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.encoding, resp.Header.Get("Content-Encoding"))
			if tc.encoding == "" {
				assert.Contains(t, string(body), "kerf_test_total 0")
			}
		})
	}
}
