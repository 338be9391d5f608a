// Package hubtest runs a real kerf-hub for tests: the hub's own server
// (package hub) over a real store (SQLite in a temporary directory, or a
// PostgreSQL database from test/pgtest) on an httptest TLS listener that
// can be stopped (the hub is down: connections are refused) and started
// again on the same address, with clusters registered and a read token.
package hubtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/hub/store"
)

// Hub is a kerf-hub serving one store.
type Hub struct {
	// URL is the hub's base URL (https://127.0.0.1:port), the same after
	// Stop and Start.
	URL string
	// CAFile is the PEM file of the hub's certificate, for a client's CA.
	CAFile string
	// TLS trusts the hub's certificate.
	TLS *tls.Config
	// Store is the hub's database.
	Store *store.Store

	server *hub.Server
	addr   string
	srv    *httptest.Server
	reader string
	tokens map[string]string
	dir    string
}

// SQLite is the DSN of a new SQLite database in the test's temporary
// directory.
func SQLite(tb testing.TB) string {
	return "sqlite:" + filepath.Join(tb.TempDir(), "hub.db")
}

// Start opens dsn (migrating it), registers clusters, makes a read token
// and serves the hub until the test ends.
func Start(tb testing.TB, dsn string, clusters ...string) *Hub {
	tb.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, slog.New(slog.DiscardHandler))
	require.NoError(tb, err, "open the hub's store")
	tb.Cleanup(func() { _ = st.Close() })
	h := &Hub{Store: st, server: hub.New(st, slog.New(slog.DiscardHandler)), tokens: map[string]string{}, dir: tb.TempDir()}
	for _, c := range clusters {
		tok, err := st.AddCluster(ctx, c)
		require.NoError(tb, err, "register cluster %s", c)
		h.tokens[c] = tok
	}
	h.reader, err = st.AddReader(ctx, "test")
	require.NoError(tb, err, "make a read token")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	h.addr = ln.Addr().String()
	h.serve(ln)
	tb.Cleanup(h.Stop)
	h.URL = "https://" + h.addr
	// httptest's certificate is the same at every start, so one pool
	// trusts the hub across Stop and Start.
	pool := h.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	h.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	h.CAFile = filepath.Join(h.dir, "hub.crt")
	require.NoError(tb, os.WriteFile(h.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw}), 0o600))
	return h
}

func (h *Hub) serve(ln net.Listener) {
	h.srv = httptest.NewUnstartedServer(h.server.Handler())
	_ = h.srv.Listener.Close()
	h.srv.Listener = ln
	h.srv.StartTLS()
}

// Stop takes the hub down: its listener is closed, so connections to URL
// are refused, and open ones are closed.
func (h *Hub) Stop() {
	if h.srv != nil {
		h.srv.Close()
		h.srv = nil
	}
}

// Up serves the hub again on the same address after Stop.
func (h *Hub) Up(tb testing.TB) {
	tb.Helper()
	if h.srv != nil {
		return
	}
	ln, err := net.Listen("tcp", h.addr)
	require.NoError(tb, err, "listen again on %s", h.addr)
	h.serve(ln)
}

// TokenFile writes the cluster's token to a file and returns its path.
func (h *Hub) TokenFile(tb testing.TB, cluster string) string {
	tb.Helper()
	tok, ok := h.tokens[cluster]
	require.True(tb, ok, "cluster %s is not registered", cluster)
	p := filepath.Join(h.dir, cluster+".token")
	require.NoError(tb, os.WriteFile(p, []byte(tok+"\n"), 0o600))
	return p
}

// get reads path with the read token; the hub must be up.
func (h *Hub) get(tb testing.TB, path string) []byte {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, h.URL+path, nil)
	require.NoError(tb, err)
	req.Header.Set("Authorization", "Bearer "+h.reader)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: h.TLS}}
	resp, err := c.Do(req)
	require.NoError(tb, err, "GET %s", path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	require.Equal(tb, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
	return b
}

// Audit walks every page of GET /v1/audit with the query (url.Values
// encoded, such as "cluster=east") and returns the actions, newest first.
func (h *Hub) Audit(tb testing.TB, query url.Values) []hubv1.Entry {
	tb.Helper()
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", "1000")
	var out []hubv1.Entry
	for {
		var page hubv1.AuditPage
		require.NoError(tb, json.Unmarshal(h.get(tb, "/v1/audit?"+q.Encode()), &page))
		out = append(out, page.Items...)
		if page.Continue == "" {
			return out
		}
		q.Set("continue", page.Continue)
	}
}

// Clusters returns GET /v1/clusters.
func (h *Hub) Clusters(tb testing.TB) []hubv1.Cluster {
	tb.Helper()
	var list hubv1.ClusterList
	require.NoError(tb, json.Unmarshal(h.get(tb, "/v1/clusters"), &list))
	return list.Items
}

// Metrics returns the hub's /metrics text.
func (h *Hub) Metrics(tb testing.TB) string {
	tb.Helper()
	return string(h.get(tb, "/metrics"))
}

// ActionsTotal returns the hub's kerf_actions_total sample with exactly
// these labels (0 when absent).
func (h *Hub) ActionsTotal(tb testing.TB, cluster, typ, reason, resource string) float64 {
	tb.Helper()
	want := fmt.Sprintf(`kerf_actions_total{cluster=%q,reason=%q,resource=%q,type=%q} `, cluster, reason, resource, typ)
	for line := range bytes.Lines([]byte(h.Metrics(tb))) {
		if rest, ok := bytes.CutPrefix(line, []byte(want)); ok {
			var v float64
			_, err := fmt.Sscan(string(rest), &v)
			require.NoError(tb, err)
			return v
		}
	}
	return 0
}
