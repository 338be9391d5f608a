package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub/store"
)

// savingsReport is a report of cluster at t with one namespace per name,
// its figures growing with its position.
func savingsReport(cluster string, t time.Time, namespaces ...string) hubv1.SavingsReport {
	r := hubv1.SavingsReport{Cluster: cluster, Time: metav1.NewTime(t), Namespaces: []hubv1.NamespaceSavings{}}
	for i, ns := range namespaces {
		n := int64(i + 1)
		r.Namespaces = append(r.Namespaces, hubv1.NamespaceSavings{
			Namespace: ns, Workloads: i + 1, Unrecorded: i,
			Manifest:    hubv1.Amounts{CPUMillis: 1000 * n, MemoryBytes: 1 << 30 * n},
			InForce:     hubv1.Amounts{CPUMillis: 500 * n, MemoryBytes: 512 << 20 * n},
			Recommended: hubv1.Amounts{CPUMillis: 250 * n, MemoryBytes: 256 << 20 * n},
		})
	}
	return r
}

// putSavings sends r as who and returns the status and body.
func (e *env) putSavings(t testing.TB, cluster, who string, r hubv1.SavingsReport) (int, []byte) {
	t.Helper()
	return e.do(t, "PUT", "/v1/clusters/"+cluster+"/savings", who, mustJSON(t, r))
}

// TestSavingsReportsRoundTripThroughTheStore: a report is stored whole
// and replaces the cluster's previous one (a namespace it does not name
// goes), an older report changes nothing, each cluster keeps its own, and
// removing a cluster drops its report; on SQLite and PostgreSQL.
func TestSavingsReportsRoundTripThroughTheStore(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		t0 := e.now.Add(-time.Minute)
		first := savingsReport("east", t0, "batch", "shop")
		res, err := e.store.PutSavings(ctx, "east", &first)
		require.NoError(t, err)
		assert.Equal(t, hubv1.SavingsResult{Stored: 2}, res)
		west := savingsReport("west", t0, "web")
		_, err = e.store.PutSavings(ctx, "west", &west)
		require.NoError(t, err)

		got, err := e.store.Savings(ctx, "east", "")
		require.NoError(t, err)
		require.Len(t, got, 2)
		assert.Equal(t, store.NamespaceSavings{Cluster: "east", Reported: t0, NamespaceSavings: first.Namespaces[0]}, got[0])
		assert.Equal(t, store.NamespaceSavings{Cluster: "east", Reported: t0, NamespaceSavings: first.Namespaces[1]}, got[1])

		// A newer report replaces the cluster's rows: shop goes.
		second := savingsReport("east", t0.Add(30*time.Second), "batch")
		second.Namespaces[0].Recommended.CPUMillis = 100
		_, err = e.store.PutSavings(ctx, "east", &second)
		require.NoError(t, err)
		got, err = e.store.Savings(ctx, "", "")
		require.NoError(t, err)
		assert.Equal(t, []store.NamespaceSavings{
			{Cluster: "east", Reported: t0.Add(30 * time.Second), NamespaceSavings: second.Namespaces[0]},
			{Cluster: "west", Reported: t0, NamespaceSavings: west.Namespaces[0]},
		}, got)

		// An older report (a deposed leader's) changes nothing.
		res, err = e.store.PutSavings(ctx, "east", &first)
		require.NoError(t, err)
		assert.True(t, res.Superseded)
		got, err = e.store.Savings(ctx, "east", "batch")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, int64(100), got[0].Recommended.CPUMillis)
		reports, err := e.store.SavingsReports(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]time.Time{"east": t0.Add(30 * time.Second), "west": t0}, reports)

		// Removing a cluster drops its report; it cannot send another.
		_, err = e.store.RemoveCluster(ctx, "west", false)
		require.NoError(t, err)
		got, err = e.store.Savings(ctx, "west", "")
		require.NoError(t, err)
		assert.Empty(t, got)
		reports, err = e.store.SavingsReports(ctx)
		require.NoError(t, err)
		assert.NotContains(t, reports, "west")
		later := savingsReport("west", t0.Add(time.Hour), "web")
		_, err = e.store.PutSavings(ctx, "west", &later)
		require.ErrorIs(t, err, store.ErrNotFound)
		// And purging it afterwards still works (no row holds its name).
		_, err = e.store.RemoveCluster(ctx, "west", true)
		require.NoError(t, err)
	})
}

// TestTheSavingsEndpointTakesOnlyTheClustersOwnValidReport: PUT
// /v1/clusters/{cluster}/savings needs the cluster's own token, refuses
// a body past --max-body-bytes (413) and more than MaxSavingsNamespaces
// namespaces (400, naming the field and the bound), names a bad field,
// and counts every refusal in kerf_hub_savings_reports_total.
func TestTheSavingsEndpointTakesOnlyTheClustersOwnValidReport(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		good := savingsReport("east", e.now.Add(-time.Minute), "shop")
		for _, tc := range []struct {
			name, who string
			want      int
			msg       string
		}{
			{"without a token", "", http.StatusUnauthorized, "missing bearer token"},
			{"with another cluster's token", "west", http.StatusForbidden, "writes only /v1/clusters/west/actions and /v1/clusters/west/savings"},
			{"with the read token", "reader", http.StatusForbidden, "a read token cannot write"},
		} {
			status, body := e.putSavings(t, "east", tc.who, good)
			assert.Equal(t, tc.want, status, "%s: %s", tc.name, body)
			assert.Contains(t, string(body), tc.msg, tc.name)
		}
		got, err := e.store.Savings(context.Background(), "", "")
		require.NoError(t, err)
		assert.Empty(t, got, "no refused report was stored")

		names := make([]string, hubv1.MaxSavingsNamespaces+1)
		for i := range names {
			names[i] = fmt.Sprintf("ns-%d", i)
		}
		bad := func(f func(r *hubv1.SavingsReport)) hubv1.SavingsReport {
			r := savingsReport("east", e.now.Add(-time.Minute), "shop", "web")
			f(&r)
			return r
		}
		for _, tc := range []struct {
			name   string
			report hubv1.SavingsReport
			field  string
			msg    string
		}{
			{"another cluster's name", bad(func(r *hubv1.SavingsReport) { r.Cluster = "west" }), "cluster", "must be the cluster of the path"},
			{"no time", bad(func(r *hubv1.SavingsReport) { r.Time = metav1.Time{} }), "time", "must be set"},
			{"a time in the future", bad(func(r *hubv1.SavingsReport) { r.Time = metav1.NewTime(e.now.Add(2 * time.Hour)) }), "time", "after the hub's clock"},
			{"a bad namespace", bad(func(r *hubv1.SavingsReport) { r.Namespaces[1].Namespace = "Web_" }), "namespaces[1].namespace", "must be a namespace name"},
			{"a namespace twice", bad(func(r *hubv1.SavingsReport) { r.Namespaces[1].Namespace = "shop" }), "namespaces[1].namespace", "each namespace once"},
			{"a negative request", bad(func(r *hubv1.SavingsReport) { r.Namespaces[0].Recommended.MemoryBytes = -1 }), "namespaces[0].recommended.memoryBytes", "must not be negative"},
			{"too many namespaces", savingsReport("east", e.now.Add(-time.Minute), names...), "namespaces", "at most 2000 namespaces"},
		} {
			status, body := e.putSavings(t, "east", "east", tc.report)
			require.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.name, body)
			var er auditv1.Error
			require.NoError(t, json.Unmarshal(body, &er), string(body))
			assert.Equal(t, tc.field, er.Field, tc.name)
			assert.Contains(t, er.Error, tc.msg, tc.name)
		}

		// A body past --max-body-bytes: 413.
		e.server.MaxBodyBytes = 1024
		status, body := e.putSavings(t, "east", "east", savingsReport("east", e.now.Add(-time.Minute), names[:50]...))
		assert.Equal(t, http.StatusRequestEntityTooLarge, status, string(body))
		assert.Contains(t, string(body), "larger than 1024 bytes")
		got, err = e.store.Savings(context.Background(), "", "")
		require.NoError(t, err)
		assert.Empty(t, got, "no refused report was stored")
		assert.Contains(t, metrics(t, e), `kerf_hub_savings_reports_total{result="refused"} 8`)

		status, body = e.putSavings(t, "east", "east", good)
		require.Equal(t, http.StatusOK, status, string(body))
		assert.JSONEq(t, `{"stored":1}`, string(body))
		assert.Contains(t, metrics(t, e), `kerf_hub_savings_reports_total{result="stored"} 1`)
		status, _ = e.do(t, "POST", "/v1/clusters/east/savings", "east", mustJSON(t, good))
		assert.Equal(t, http.StatusMethodNotAllowed, status)
	})
}
