package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/test/pgtest"
)

// pg is the package's PostgreSQL, started once by TestMain; pgWhy says why
// there is none.
var (
	pg    *pgtest.Server
	pgWhy error
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pg, &pgWhy)) }

// quiet drops the logs of migrations.
var quiet = slog.New(slog.DiscardHandler)

// backends are the databases every test runs on.
var backends = []string{"sqlite", "postgres"}

// openStore opens an empty store of the backend for one test.
func openStore(tb testing.TB, backend string) *store.Store {
	st, _ := openStoreDSN(tb, backend)
	return st
}

// openStoreDSN is openStore that also returns the database's DSN.
func openStoreDSN(tb testing.TB, backend string) (*store.Store, string) {
	tb.Helper()
	ctx := context.Background()
	var dsn string
	switch backend {
	case "sqlite":
		dsn = "sqlite:" + filepath.Join(tb.TempDir(), "hub.db")
	case "postgres":
		srv := pgtest.Need(tb, pg, pgWhy)
		var err error
		dsn, err = srv.NewDatabase(ctx)
		require.NoError(tb, err)
	}
	st, err := store.Open(ctx, dsn, quiet)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	return st, dsn
}

// env is a hub over TLS on one backend with two clusters and a reader.
type env struct {
	store  *store.Store
	server *hub.Server
	url    string
	client *http.Client
	tokens map[string]string // cluster name or "reader" → token
	now    time.Time
	// dsn opens the same database again, as another replica would.
	dsn string
}

func newEnv(t *testing.T, backend string) *env {
	t.Helper()
	st, dsn := openStoreDSN(t, backend)
	ctx := context.Background()
	e := &env{store: st, dsn: dsn, tokens: map[string]string{}, now: time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)}
	for _, c := range []string{"east", "west"} {
		tok, err := st.AddCluster(ctx, c)
		require.NoError(t, err)
		e.tokens[c] = tok
	}
	tok, err := st.AddReader(ctx, "ops")
	require.NoError(t, err)
	e.tokens["reader"] = tok
	e.server = hub.New(st, quiet)
	e.server.Now = func() time.Time { return e.now }
	ts := httptestTLS(t, e.server)
	e.url, e.client = ts.url, ts.client
	return e
}

type tlsServer struct {
	url    string
	client *http.Client
}

// httptestTLS serves s over TLS on loopback until the test ends.
func httptestTLS(tb testing.TB, s *hub.Server) tlsServer {
	ts := httptest.NewTLSServer(s.Handler())
	tb.Cleanup(ts.Close)
	return tlsServer{url: ts.URL, client: ts.Client()}
}

// post writes body as the cluster's own token.
func (e *env) post(t testing.TB, cluster string, body []byte) (int, []byte) {
	return e.do(t, "POST", "/v1/clusters/"+cluster+"/actions", cluster, body)
}

// do sends a request with the token of who ("" for none) and returns the
// status and body.
func (e *env) do(t testing.TB, method, path, who string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// write posts a batch as the cluster's own token and requires a 200.
func (e *env) write(t testing.TB, cluster string, actions ...hubv1.Action) hubv1.BatchResult {
	t.Helper()
	status, body := e.do(t, "POST", "/v1/clusters/"+cluster+"/actions", cluster, mustJSON(t, batch(cluster, actions...)))
	require.Equal(t, http.StatusOK, status, string(body))
	var res hubv1.BatchResult
	require.NoError(t, json.Unmarshal(body, &res))
	return res
}

// get reads path as the reader into v and requires a 200.
func (e *env) get(t testing.TB, path string, v any) {
	t.Helper()
	status, body := e.do(t, "GET", path, "reader", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, v), string(body))
}

func batch(cluster string, actions ...hubv1.Action) hubv1.Batch {
	return hubv1.Batch{Cluster: cluster, Leader: hubv1.LeaderReport{Identity: "kerf-leader-0", AgentsConnected: 3, Undelivered: int64(len(actions)), LagSeconds: 1.5}, Actions: actions}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// action makes an action of workload ns/Deployment/name at minute min of
// 2030-03-01 12:00, keyed by workload and seq.
func action(ns, name string, seq int64, typ v1alpha1.ActionType, reason string, min int, res ...v1alpha1.ResourceName) hubv1.Action {
	return hubv1.Action{
		Key:   fmt.Sprintf("%s/%s/%d", ns, name, seq),
		Seq:   seq,
		Phase: v1alpha1.PhaseWatching,
		Entry: auditv1.Entry{
			Time:           metav1.NewTime(time.Date(2030, 3, 1, 12, min, 0, 0, time.UTC)),
			Type:           typ,
			Reason:         reason,
			Message:        fmt.Sprintf("%s %s of %s/%s #%d", typ, reason, ns, name, seq),
			Resources:      res,
			Figures:        []string{"oomKills 2 ≥ 1"},
			Namespace:      ns,
			Recommendation: name,
			Workload:       auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: name},
		},
	}
}
