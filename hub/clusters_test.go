package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub/store"
)

// TestARemovedClusterIsRefusedAtOnceAndKeepsItsActions removes a cluster
// the default way: its tokens (both, after a rotation) get 401 at once, a
// write that authenticated before the removal is refused, and its actions,
// workloads and counters stay readable; its name cannot be registered over
// them.
func TestARemovedClusterIsRefusedAtOnceAndKeepsItsActions(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.write(t, "east", action("shop", "web", 1, v1alpha1.ActionRolledBack, "OOMKills", 0, v1alpha1.ResourceMemory))
		e.write(t, "west", action("shop", "api", 1, v1alpha1.ActionApplied, "Rollout", 0))
		rotated, err := e.store.AddClusterToken(ctx, "east")
		require.NoError(t, err)

		e.store.Now = func() time.Time { return time.Date(2030, 3, 2, 8, 0, 0, 0, time.UTC) }
		rm, err := e.store.RemoveCluster(ctx, "east", false)
		require.NoError(t, err)
		assert.Equal(t, store.Removal{TokensRevoked: 2, RemovedAt: time.Date(2030, 3, 2, 8, 0, 0, 0, time.UTC)}, rm)

		body := mustJSON(t, batch("east", action("shop", "web", 2, v1alpha1.ActionApplied, "Rollout", 20)))
		status, resp := e.post(t, "east", body)
		assert.Equal(t, http.StatusUnauthorized, status, "the old token: %s", resp)
		e.tokens["east-rotated"] = rotated
		status, resp = e.do(t, "POST", "/v1/clusters/east/actions", "east-rotated", body)
		assert.Equal(t, http.StatusUnauthorized, status, "the rotated token too: %s", resp)
		// A write already past authentication when the removal committed.
		b := batch("east", action("shop", "web", 2, v1alpha1.ActionApplied, "Rollout", 20))
		_, err = e.store.Ingest(ctx, "east", &b)
		assert.ErrorIs(t, err, store.ErrNotFound)
		e.write(t, "west", action("shop", "api", 2, v1alpha1.ActionHealthy, "Stable", 30))

		var page hubv1.AuditPage
		e.get(t, "/v1/audit?cluster=east", &page)
		assert.Equal(t, []string{"rolled_back OOMKills of shop/web #1"}, messagesOf(page.Items), "the audit trail outlives the cluster; nothing after the removal")
		var ws hubv1.WorkloadPage
		e.get(t, "/v1/workloads?cluster=east", &ws)
		assert.Len(t, ws.Items, 1)
		assert.Contains(t, metrics(t, e), `kerf_actions_total{cluster="east",reason="OOMKills",resource="memory",type="rolled_back"} 1`)
		var cs hubv1.ClusterList
		e.get(t, "/v1/clusters", &cs)
		require.Len(t, cs.Items, 2)
		require.NotNil(t, cs.Items[0].RemovedAt)
		assert.Equal(t, time.Date(2030, 3, 2, 8, 0, 0, 0, time.UTC), cs.Items[0].RemovedAt.UTC())
		assert.Nil(t, cs.Items[1].RemovedAt, "west is not removed")

		_, err = e.store.AddCluster(ctx, "east")
		assert.ErrorIs(t, err, store.ErrRemoved)
		assert.ErrorContains(t, err, `cluster "east" was removed at 2030-03-02T08:00:00Z`)
		_, err = e.store.AddClusterToken(ctx, "east")
		assert.ErrorIs(t, err, store.ErrRemoved)
		_, err = e.store.RemoveCluster(ctx, "east", false)
		assert.ErrorIs(t, err, store.ErrRemoved)
		assert.ErrorContains(t, err, "--purge")
		_, err = e.store.RemoveCluster(ctx, "north", false)
		assert.ErrorIs(t, err, store.ErrNotFound)
		assert.ErrorContains(t, err, `cluster "north" is not registered`)
	})
}

// TestAPurgedClusterLeavesNothingAndFreesItsName purges a cluster with more
// actions than one delete chunk, first after a removal that kept them:
// its actions, workloads, counters and registration go, the other
// cluster's stay, and the name registers again from nothing.
func TestAPurgedClusterLeavesNothingAndFreesItsName(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const n = 5001 // one more than the store's delete chunk
		for start := 0; start < n; start += 1000 {
			var acts []hubv1.Action
			for i := start; i < min(start+1000, n); i++ {
				a := action("shop", fmt.Sprintf("w%d", i%7), int64(i+1), v1alpha1.ActionRolledBack, "OOMKills", i%60, v1alpha1.ResourceMemory)
				a.Key = fmt.Sprintf("k%d", i)
				acts = append(acts, a)
			}
			b := batch("east", acts...)
			_, err := e.store.Ingest(ctx, "east", &b)
			require.NoError(t, err)
		}
		e.write(t, "west", action("shop", "api", 1, v1alpha1.ActionRolledBack, "OOMKills", 0, v1alpha1.ResourceMemory))
		_, err := e.store.RemoveCluster(ctx, "east", false)
		require.NoError(t, err)

		rm, err := e.store.RemoveCluster(ctx, "east", true)
		require.NoError(t, err)
		assert.True(t, rm.Purged)
		assert.Equal(t, int64(n), rm.ActionsDeleted)
		assert.Zero(t, rm.TokensRevoked, "the first removal revoked them")

		var page hubv1.AuditPage
		e.get(t, "/v1/audit?cluster=east", &page)
		assert.Empty(t, page.Items)
		e.get(t, "/v1/audit", &page)
		assert.Equal(t, []string{"rolled_back OOMKills of shop/api #1"}, messagesOf(page.Items))
		var ws hubv1.WorkloadPage
		e.get(t, "/v1/workloads", &ws)
		require.Len(t, ws.Items, 1)
		assert.Equal(t, "west", ws.Items[0].Cluster)
		m := metrics(t, e)
		assert.NotContains(t, m, `cluster="east"`)
		assert.Contains(t, m, `kerf_actions_total{cluster="west",reason="OOMKills",resource="memory",type="rolled_back"} 1`)
		var cs hubv1.ClusterList
		e.get(t, "/v1/clusters", &cs)
		require.Len(t, cs.Items, 1)
		assert.Equal(t, "west", cs.Items[0].Name)

		tok, err := e.store.AddCluster(ctx, "east")
		require.NoError(t, err, "the name is free again")
		e.tokens["east"] = tok
		e.write(t, "east", action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0))

		// Purging a cluster that was never removed revokes its tokens too.
		rm, err = e.store.RemoveCluster(ctx, "east", true)
		require.NoError(t, err)
		assert.Equal(t, int64(1), rm.TokensRevoked)
		assert.Equal(t, int64(1), rm.ActionsDeleted)
		status, _ := e.post(t, "east", mustJSON(t, batch("east")))
		assert.Equal(t, http.StatusUnauthorized, status)
	})
}
