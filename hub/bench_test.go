package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// benchStored is how many actions BenchmarkAuditQuery stores first:
// $KERF_HUB_BENCH_ACTIONS, 20000 by default so that make bench stays short
// (docs/hub.md has the figures at 1,000,000).
func benchStored(b *testing.B) int {
	if v := os.Getenv("KERF_HUB_BENCH_ACTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err, "KERF_HUB_BENCH_ACTIONS")
		return n
	}
	return 20000
}

// benchStore opens an empty store for a benchmark; PostgreSQL is a durable
// server of its own (fsync on), not the tests' fast one.
func benchStore(b *testing.B, backend string) *store.Store {
	b.Helper()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(b.TempDir(), "hub.db")
	if backend == "postgres" {
		if err := pgtest.Available(); err != nil {
			pgtest.Need(b, nil, err)
		}
		srv, err := pgtest.Start(ctx, pgtest.Options{Durable: true})
		require.NoError(b, err)
		b.Cleanup(srv.Stop)
		dsn, err = srv.NewDatabase(ctx)
		require.NoError(b, err)
	}
	st, err := store.Open(ctx, dsn, quiet)
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	return st
}

var benchTypes = []v1alpha1.ActionType{
	v1alpha1.ActionApplied, v1alpha1.ActionHealthy, v1alpha1.ActionApplied, v1alpha1.ActionHealthy,
	v1alpha1.ActionRolledBack, v1alpha1.ActionBlocked, v1alpha1.ActionApplied, v1alpha1.ActionHealthy,
	v1alpha1.ActionFailed, v1alpha1.ActionApplied,
}

// benchAction is action i of a fleet of 20 clusters, 50 namespaces and
// 1000 workloads per cluster, spread over 400 days.
func benchAction(i int, start time.Time) (string, hubv1.Action) {
	cluster := fmt.Sprintf("c%02d", i%20)
	wl := (i / 20) % 1000
	ns := fmt.Sprintf("ns%02d", wl%50)
	name := fmt.Sprintf("app%03d", wl)
	typ := benchTypes[(uint32(i)*2654435761>>16)%uint32(len(benchTypes))]
	return cluster, hubv1.Action{
		Key: fmt.Sprintf("a%d", i), Seq: int64(i/20000 + 1), Phase: v1alpha1.PhaseWatching,
		Entry: auditv1.Entry{
			Time: metav1.NewTime(start.Add(time.Duration(i) * 400 * 24 * time.Hour / 1_000_000)),
			Type: typ, Reason: "OOMKills", Message: "2 OOM kills in 10m; restored the previous values",
			Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Figures: []string{"oomKills 2 ≥ 1"},
			Namespace: ns, Recommendation: name, Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: name},
		},
	}
}

func registerBenchClusters(b *testing.B, st *store.Store) map[string]string {
	tokens := map[string]string{}
	for c := range 20 {
		name := fmt.Sprintf("c%02d", c)
		tok, err := st.AddCluster(context.Background(), name)
		require.NoError(b, err)
		tokens[name] = tok
	}
	return tokens
}

// BenchmarkIngest posts batches of 100 new actions over HTTPS, as leaders
// do, and reports actions/s.
func BenchmarkIngest(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			st := benchStore(b, backend)
			tokens := registerBenchClusters(b, st)
			e := &env{store: st, tokens: tokens}
			e.server = hub.New(st, quiet)
			ts := httptestTLS(b, e.server)
			e.url, e.client = ts.url, ts.client
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			const batchSize = 100
			n := 0
			b.ResetTimer()
			for b.Loop() {
				// One batch is one cluster's: actions n, n+20, n+40, ...
				cluster, _ := benchAction(n, start)
				bt := hubv1.Batch{Cluster: cluster}
				for j := range batchSize {
					_, a := benchAction(n+j*20, start)
					a.Key = fmt.Sprintf("%s-%d-%d", a.Key, n, j)
					bt.Actions = append(bt.Actions, a)
				}
				n++
				status, body := e.post(b, cluster, mustJSON(b, bt))
				if status != http.StatusOK {
					b.Fatalf("write: %d %s", status, body)
				}
			}
			b.ReportMetric(float64(b.N*batchSize)/b.Elapsed().Seconds(), "actions/s")
		})
	}
}

// BenchmarkAuditQuery stores benchStored actions, then reads
// GET /v1/audit pages of 100 over HTTPS in four shapes (all, one type, one
// cluster and type, a namespace and type, a page deep in a type's walk),
// each a sub-benchmark reporting p50 and p99.
func BenchmarkAuditQuery(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			st := benchStore(b, backend)
			tokens := registerBenchClusters(b, st)
			reader, err := st.AddReader(context.Background(), "bench")
			require.NoError(b, err)
			tokens["reader"] = reader
			total := benchStored(b)
			start := time.Now().Add(-399 * 24 * time.Hour)
			t0 := time.Now()
			const batchSize = 1000
			for first := 0; first < total; first += batchSize * 20 {
				// Each cluster's batch holds its next 1000 actions.
				for c := range 20 {
					var bt hubv1.Batch
					for j := 0; j < batchSize; j++ {
						i := first + c + j*20
						if i >= total {
							break
						}
						bt.Cluster, _ = benchAction(i, start)
						_, a := benchAction(i, start)
						bt.Actions = append(bt.Actions, a)
					}
					if len(bt.Actions) == 0 {
						continue
					}
					_, err := st.Ingest(context.Background(), bt.Cluster, &bt)
					require.NoError(b, err)
				}
			}
			b.Logf("%s: stored %d actions in %s (%.0f actions/s in batches of %d through the store)", backend, total, time.Since(t0).Round(time.Millisecond), float64(total)/time.Since(t0).Seconds(), batchSize)
			e := &env{store: st, tokens: tokens}
			e.server = hub.New(st, quiet)
			ts := httptestTLS(b, e.server)
			e.url, e.client = ts.url, ts.client
			var deep hubv1.AuditPage
			e.get(b, "/v1/audit?type=rolled_back&limit=1000", &deep)
			for range 3 {
				if deep.Continue != "" {
					e.get(b, "/v1/audit?type=rolled_back&limit=1000&continue="+deep.Continue, &deep)
				}
			}
			for _, q := range []struct{ name, path string }{
				{"all", "/v1/audit"},
				{"type", "/v1/audit?type=rolled_back"},
				{"cluster+type", "/v1/audit?type=rolled_back&cluster=c07"},
				{"namespace+type", "/v1/audit?type=failed&namespace=ns07"},
				{"deep-page", "/v1/audit?type=rolled_back&continue=" + deep.Continue},
			} {
				b.Run(q.name, func(b *testing.B) {
					var lat []time.Duration
					for b.Loop() {
						t := time.Now()
						var p hubv1.AuditPage
						e.get(b, q.path, &p)
						if len(p.Items) == 0 {
							b.Fatalf("%s: no items", q.path)
						}
						lat = append(lat, time.Since(t))
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
					b.ReportMetric(float64(total), "stored")
				})
			}
		})
	}
}
