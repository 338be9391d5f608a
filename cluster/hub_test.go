package cluster_test

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/hubtest"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// hubConfig forwards to h as cluster, on short timings.
func hubConfig(t *testing.T, h *hubtest.Hub, cluster string) *forward.Config {
	return &forward.Config{URL: h.URL, TokenFile: h.TokenFile(t, cluster), Cluster: cluster, TLS: h.TLS,
		Interval: 100 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}
}

// hubHistory is what the hub holds of a recommendation, oldest first, as
// type/reason/message, and historyKeys the same of its status.history.
func hubHistory(entries []hubv1.Entry, ns, name string) []string {
	var out []string
	for _, e := range slices.Backward(entries) {
		if e.Namespace == ns && e.Recommendation == name {
			out = append(out, string(e.Type)+"/"+e.Reason+"/"+e.Message)
		}
	}
	return out
}

func historyKeys(rsr *v1alpha1.RightsizingRecommendation) []string {
	var out []string
	for _, a := range rsr.Status.History {
		out = append(out, string(a.Type)+"/"+a.Reason+"/"+a.Message)
	}
	return out
}

// TestTwoClustersActionsReachTheHubOnceThroughAnOutageAndAFailover runs
// two clusters' leaders (namespaces standing for clusters east and west)
// against one hub. East's first leader delivers while the hub is up; then
// the hub goes down, that leader stops, the second replica takes over and
// records more (the policy unpaused: two applies), and one recommendation
// is deleted; west records meanwhile. Once the hub is back every action of
// both clusters is there exactly once, in order, the deleted
// recommendation's included, and the hub's kerf_actions_total says so. It
// runs on a hub over SQLite and over a real PostgreSQL.
func TestTwoClustersActionsReachTheHubOnceThroughAnOutageAndAFailover(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	hubtest.EachBackend(t, []string{"east", "west"}, func(t *testing.T, h *hubtest.Hub) {
		east, west := kubetest.Namespace(t, c), kubetest.Namespace(t, c)
		require.NoError(t, c.Create(ctx, kubetest.Deployment(east, "web", "500m", "256Mi")))
		require.NoError(t, c.Create(ctx, kubetest.Deployment(east, "other", "500m", "256Mi")))
		p := kubetest.NamespacedPolicy(east, true)
		require.NoError(t, c.Create(ctx, p))
		a := leadertest.StartReplica(t, east, "a", cluster.Config{Hub: hubConfig(t, h, "east")})
		require.NoError(t, c.Create(ctx, kubetest.Recommendation(east, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
		require.NoError(t, c.Create(ctx, kubetest.Recommendation(east, "other", "other", v1alpha1.StrategyRollout, "250m", "256Mi")))
		kubetest.WaitPhase(t, c, east, "web", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
		kubetest.WaitPhase(t, c, east, "other", v1alpha1.PhaseBlocked, v1alpha1.ReasonPaused)
		require.Eventually(t, func() bool { return len(h.Audit(t, url.Values{"cluster": {"east"}})) == 2 },
			15*time.Second, 100*time.Millisecond, "a delivers while the hub is up")

		h.Stop()
		a.Stop()
		b := leadertest.StartReplica(t, east, "b", cluster.Config{Hub: hubConfig(t, h, "east")})
		require.Eventually(t, b.Leading, 15*time.Second, 50*time.Millisecond)
		kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Paused = false })
		kubetest.WaitApplied(t, c, east, "web")
		other := kubetest.WaitApplied(t, c, east, "other")
		otherHistory := historyKeys(other)
		require.Len(t, otherHistory, 2, "blocked, then applied")
		require.NoError(t, c.Delete(ctx, other))

		leadertest.StartReplica(t, west, "w", cluster.Config{Hub: hubConfig(t, h, "west")})
		require.NoError(t, c.Create(ctx, kubetest.Deployment(west, "api", "500m", "256Mi")))
		require.NoError(t, c.Create(ctx, kubetest.Recommendation(west, "api", "api", v1alpha1.StrategyRollout, "250m", "256Mi")))
		kubetest.WaitPhase(t, c, west, "api", v1alpha1.PhaseBlocked, v1alpha1.ReasonNoPolicy)
		time.Sleep(time.Second) // the forwarders fail and back off meanwhile
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(other), other), "kept while its applied action is undelivered")

		h.Up(t)
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(other), other))
		}, 20*time.Second, 100*time.Millisecond, "the deleted recommendation is let go once delivered")
		web, api := kubetest.GetRSR(t, c, east, "web"), kubetest.GetRSR(t, c, west, "api")
		require.Eventually(t, func() bool {
			return len(h.Audit(t, url.Values{"cluster": {"east"}})) == len(web.Status.History)+2 &&
				len(h.Audit(t, url.Values{"cluster": {"west"}})) == len(api.Status.History)
		}, 20*time.Second, 100*time.Millisecond, "every action reaches the hub")
		time.Sleep(500 * time.Millisecond) // nothing more arrives
		web, api = kubetest.GetRSR(t, c, east, "web"), kubetest.GetRSR(t, c, west, "api")
		eastGot, westGot := h.Audit(t, url.Values{"cluster": {"east"}}), h.Audit(t, url.Values{"cluster": {"west"}})
		assert.Equal(t, historyKeys(web), hubHistory(eastGot, east, "web"), "once each, in order")
		assert.Equal(t, otherHistory, hubHistory(eastGot, east, "other"), "the deleted recommendation's actions too")
		assert.Equal(t, historyKeys(api), hubHistory(westGot, west, "api"))
		assert.Len(t, eastGot, 4)
		for _, e := range eastGot {
			assert.Equal(t, east, e.Namespace, "west's actions are not east's")
		}

		assert.Equal(t, 2.0, h.ActionsTotal(t, "east", "blocked", v1alpha1.ReasonPaused, ""))
		assert.Equal(t, 2.0, h.ActionsTotal(t, "east", "applied", "Rollout", "cpu"))
		assert.Equal(t, 1.0, h.ActionsTotal(t, "west", "blocked", v1alpha1.ReasonNoPolicy, ""))
		require.Eventually(t, func() bool {
			cl := h.Clusters(t)
			return len(cl) == 2 && cl[0].Leader != nil && cl[0].Leader.Identity == "b" && cl[1].Leader != nil && cl[1].Leader.Identity == "w"
		}, 10*time.Second, 100*time.Millisecond, "the hub knows each cluster's leader")
	})
}

// TestARollbackDoesNotWaitForTheHub rolls back while the hub is down: the
// rollback and its status write happen at once, whatever the forwarder's
// backoff, and the rolled_back action reaches the hub, counted by its
// resource, once the hub is back.
func TestARollbackDoesNotWaitForTheHub(t *testing.T) {
	c := controlplane.Get(t).Client
	h := hubtest.Start(t, hubtest.SQLite(t), "east")
	h.Stop()
	ns := kubetest.Namespace(t, c)
	hc := hubConfig(t, h, "east")
	hc.MinBackoff, hc.MaxBackoff = 5*time.Second, 10*time.Second
	dep, _ := leadertest.WatchedWeb(t, c, ns, kubetest.PolicyWith(ns, time.Hour, nil), cluster.Config{Hub: hc}, "250m", "128Mi")
	pod := kubetest.AdoptedPod(t, c, dep, "web-new-1")

	start := time.Now()
	kubetest.OOMKilled(t, c, pod, "OOMKilled")
	kubetest.WaitPhase(t, c, ns, "web", v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchOOMKills)
	rsr := kubetest.WaitRestored(t, c, ns, "web")
	assert.Less(t, time.Since(start), 15*time.Second, "the rollback waited for nothing (the hub is down all along)")
	assert.Equal(t, "256Mi", kubetest.TemplateResources(t, c, dep).Requests.Memory().String())

	h.Up(t)
	require.Eventually(t, func() bool {
		return h.ActionsTotal(t, "east", "rolled_back", v1alpha1.HealthWatchOOMKills, "memory") == 1
	}, 30*time.Second, 200*time.Millisecond, "the rollback reaches the hub")
	require.Eventually(t, func() bool {
		rsr = kubetest.GetRSR(t, c, ns, "web")
		return len(h.Audit(t, url.Values{"cluster": {"east"}})) == len(rsr.Status.History)
	}, 30*time.Second, 200*time.Millisecond)
	assert.Equal(t, historyKeys(rsr), hubHistory(h.Audit(t, url.Values{"cluster": {"east"}}), ns, "web"))
	assert.Equal(t, 0.0, h.ActionsTotal(t, "east", "rolled_back", v1alpha1.HealthWatchOOMKills, "cpu"))
}

// TestALeaderWithoutAHubLetsItsRecommendationsGo turns the hub off the way
// an operator does: a leader with a hub adds its finalizer to two
// recommendations, the hub goes away with an action of each undelivered,
// one recommendation is deleted (kept by the finalizer), and the next
// leader runs without --hub-url. It removes the finalizer from both: the
// deleted recommendation is really deleted, its undelivered action counted
// as dropped (reason disabled), and the live one's kept as undelivered.
func TestALeaderWithoutAHubLetsItsRecommendationsGo(t *testing.T) {
	c := controlplane.Get(t).Client
	ctx := context.Background()
	h := hubtest.Start(t, hubtest.SQLite(t), "east")
	ns := kubetest.Namespace(t, c)
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "web", "500m", "256Mi")))
	require.NoError(t, c.Create(ctx, kubetest.Deployment(ns, "other", "500m", "256Mi")))
	p := kubetest.NamespacedPolicy(ns, true)
	require.NoError(t, c.Create(ctx, p))
	a := leadertest.StartReplica(t, ns, "a", cluster.Config{Hub: hubConfig(t, h, "east")})
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "web", "web", v1alpha1.StrategyRollout, "250m", "256Mi")))
	require.NoError(t, c.Create(ctx, kubetest.Recommendation(ns, "other", "other", v1alpha1.StrategyRollout, "250m", "256Mi")))
	require.Eventually(t, func() bool { return len(h.Audit(t, url.Values{"cluster": {"east"}})) == 2 },
		15*time.Second, 100*time.Millisecond, "a delivers the two blocked actions")
	for _, name := range []string{"web", "other"} {
		assert.Contains(t, kubetest.GetRSR(t, c, ns, name).Finalizers, forward.Finalizer)
	}

	h.Stop()
	kubetest.Update(t, c, p, func() { p.Spec.Guardrails.Paused = false })
	kubetest.WaitApplied(t, c, ns, "web")
	other := kubetest.WaitApplied(t, c, ns, "other")
	a.Stop()
	require.NoError(t, c.Delete(ctx, other))
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(other), other), "kept by the finalizer while no leader runs")

	b := leadertest.StartReplica(t, ns, "b", cluster.Config{})
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(other), other))
	}, 20*time.Second, 100*time.Millisecond, "the deleted recommendation is really deleted")
	require.Eventually(t, func() bool {
		return !slices.Contains(kubetest.GetRSR(t, c, ns, "web").Finalizers, forward.Finalizer)
	}, 10*time.Second, 100*time.Millisecond, "the live recommendation's finalizer goes too")
	require.Eventually(t, func() bool {
		return leadertest.MetricValue(t, b, "kerf_hub_dropped_total", "reason", "disabled") == 1
	}, 10*time.Second, 100*time.Millisecond, "other's applied action, never delivered, is counted as dropped")
	// The release pass sets the gauge after it counted the drops: wait
	// for it, not only for the counter.
	require.Eventually(t, func() bool {
		return leadertest.MetricValue(t, b, "kerf_hub_undelivered") >= 1
	}, 10*time.Second, 100*time.Millisecond, "web's applied action stays in its history, undelivered")
	assert.Equal(t, 0.0, leadertest.MetricValue(t, b, "kerf_hub_dropped_total", "reason", "deleted"))
}
