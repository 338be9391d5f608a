package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/hub/store"
)

// each runs fn on a fresh hub over every backend: the same suite on SQLite
// and on a real PostgreSQL.
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

func messagesOf(items []hubv1.Entry) []string {
	out := make([]string, len(items))
	for i, e := range items {
		out[i] = e.Message
	}
	return out
}

func TestWrittenActionsReadBackWithTheLeadersJSONAndTheCluster(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		res := e.write(t, "east",
			action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0, v1alpha1.ResourceMemory),
			action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 10, v1alpha1.ResourceMemory))
		assert.Equal(t, 2, res.Stored)
		assert.Equal(t, []hubv1.ActionResult{{Key: "shop/web/1", Status: hubv1.StatusStored}, {Key: "shop/web/2", Status: hubv1.StatusStored}}, res.Actions)

		status, body := e.do(t, "GET", "/v1/audit?type=rolled_back", "reader", nil)
		require.Equal(t, http.StatusOK, status, string(body))
		var raw struct {
			Items    []map[string]json.RawMessage `json:"items"`
			Continue *string                      `json:"continue"`
		}
		require.NoError(t, json.Unmarshal(body, &raw))
		require.Len(t, raw.Items, 1)
		keys := make([]string, 0, len(raw.Items[0]))
		for k := range raw.Items[0] {
			keys = append(keys, k)
		}
		assert.ElementsMatch(t, []string{"time", "type", "reason", "message", "resources", "containers", "figures",
			"namespace", "recommendation", "workload", "cluster", "workloadId", "seq"}, keys, "the leader's keys (docs/audit-api.md) plus the hub's")
		assert.JSONEq(t, `"2030-03-01T12:10:00Z"`, string(raw.Items[0]["time"]))
		assert.JSONEq(t, `[]`, string(raw.Items[0]["containers"]), "empty lists are [], never null")
		require.NotNil(t, raw.Continue)
		assert.Empty(t, *raw.Continue)

		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		require.Len(t, page.Items, 2)
		got := page.Items[0]
		assert.Equal(t, "east", got.Cluster)
		assert.Equal(t, store.WorkloadID("east", "shop", v1alpha1.KindDeployment, "web"), got.WorkloadID)
		assert.Equal(t, int64(2), got.Seq)
		assert.Equal(t, v1alpha1.ActionRolledBack, got.Type)
		assert.Equal(t, "OOMKills", got.Reason)
		assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}, got.Workload)
		assert.Equal(t, []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, got.Resources)
		assert.Equal(t, []string{"oomKills 2 ≥ 1"}, got.Figures)
		assert.Equal(t, "applied Rollout of shop/web #1", page.Items[1].Message, "newest first")
	})
}

func TestAReplayedActionIsAcknowledgedAndStoredOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		a1 := action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0, v1alpha1.ResourceCPU)
		a2 := action("shop", "web", 2, v1alpha1.ActionRolledBack, "Throttling", 5, v1alpha1.ResourceCPU)
		e.write(t, "east", a1)
		res := e.write(t, "east", a1, a2) // the leader did not see the first ack
		assert.Equal(t, 1, res.Stored)
		assert.Equal(t, 1, res.Duplicates)
		assert.Equal(t, []hubv1.ActionResult{{Key: a1.Key, Status: hubv1.StatusDuplicate}, {Key: a2.Key, Status: hubv1.StatusStored}}, res.Actions)
		res = e.write(t, "east", a1, a2)
		assert.Equal(t, 0, res.Stored)
		assert.Equal(t, 2, res.Duplicates)

		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		assert.Len(t, page.Items, 2)
		// A resend after a failover may carry a later phase and a list
		// spelled [] instead of absent: still the same action.
		again := a2
		again.Phase = v1alpha1.PhaseHealthy
		again.Containers = []v1alpha1.ContainerValueChange{}
		res = e.write(t, "east", again)
		assert.Equal(t, 1, res.Duplicates)
		var wl hubv1.WorkloadPage
		e.get(t, "/v1/workloads", &wl)
		require.Len(t, wl.Items, 1)
		assert.Equal(t, v1alpha1.PhaseWatching, wl.Items[0].Phase, "a duplicate changes nothing")

		// Another cluster may use the same keys: keys are per cluster.
		assert.Equal(t, 1, e.write(t, "west", a1).Stored)
	})
}

func TestAKeyReusedWithOtherContentIsRefusedAndChangesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		a1 := action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0)
		e.write(t, "east", a1)
		other := a1
		other.Message = "something else"
		fresh := action("shop", "db", 1, v1alpha1.ActionApplied, "Rollout", 1)
		status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, batch("east", fresh, other)))
		require.Equal(t, http.StatusConflict, status, string(body))
		var er auditv1.Error
		require.NoError(t, json.Unmarshal(body, &er))
		assert.Equal(t, "actions[1].key", er.Field)
		assert.Contains(t, er.Error, `"shop/web/1"`)
		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		assert.Equal(t, []string{a1.Message}, messagesOf(page.Items), "the batch's new action was not stored either")
	})
}

func TestTokensAuthorizeOnlyTheirOwnPart(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.tokens["forged"] = "kerf_0123456789abcdef_notthesecret"
		e.tokens["garbage"] = "hello"
		body := mustJSON(t, batch("west", action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0)))
		for _, tc := range []struct {
			name, method, path, who string
			body                    []byte
			want                    int
			msg                     string
		}{
			{"a read without a token", "GET", "/v1/audit", "", nil, http.StatusUnauthorized, "missing bearer token"},
			{"a read with an unknown token", "GET", "/v1/workloads", "forged", nil, http.StatusUnauthorized, "invalid bearer token"},
			{"a read with a malformed token", "GET", "/v1/clusters", "garbage", nil, http.StatusUnauthorized, "invalid bearer token"},
			{"metrics without a token", "GET", "/metrics", "", nil, http.StatusUnauthorized, "missing bearer token"},
			{"a read with a cluster's token", "GET", "/v1/audit", "east", nil, http.StatusForbidden, "reading needs a read token"},
			{"a write without a token", "POST", "/v1/clusters/west/actions", "", body, http.StatusUnauthorized, "missing bearer token"},
			{"a write with another cluster's token", "POST", "/v1/clusters/west/actions", "east", body, http.StatusForbidden, `writes only /v1/clusters/east/actions`},
			{"a write with the read token", "POST", "/v1/clusters/west/actions", "reader", body, http.StatusForbidden, "a read token cannot write"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, got := e.do(t, tc.method, tc.path, tc.who, tc.body)
				assert.Equal(t, tc.want, status, string(got))
				assert.Contains(t, string(got), tc.msg)
			})
		}
		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		assert.Empty(t, page.Items, "no refused write stored anything")
		var cs hubv1.ClusterList
		e.get(t, "/v1/clusters", &cs)
		for _, c := range cs.Items {
			assert.Nil(t, c.LastContact, "a refused write is no contact: %s", c.Name)
		}

		tokens, err := e.store.Tokens(context.Background())
		require.NoError(t, err)
		var eastID string
		for _, tk := range tokens {
			if tk.Cluster == "east" {
				eastID = tk.ID
			}
		}
		require.NoError(t, e.store.RevokeToken(context.Background(), eastID))
		status, _ := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, batch("east")))
		assert.Equal(t, http.StatusUnauthorized, status, "a revoked token stops working")
	})
}

func TestABadBatchGetsA4xxNamingTheFieldAndChangesNothing(t *testing.T) {
	valid := action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0)
	with := func(f func(a *hubv1.Action)) []byte {
		a := action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 1)
		f(&a)
		b, _ := json.Marshal(batch("east", valid, a))
		return b
	}
	many := make([]hubv1.Action, hubv1.MaxBatchActions+1)
	for i := range many {
		many[i] = action("shop", "web", int64(i+1), v1alpha1.ActionHealthy, "Healthy", 0)
	}
	manyJSON, _ := json.Marshal(batch("east", many...))
	huge, _ := json.Marshal(batch("east", action("shop", "web", 1, v1alpha1.ActionApplied, strings.Repeat("x", 100), 0)))
	huge = []byte(strings.Replace(string(huge), `"message":"`, `"message":"`+strings.Repeat("m", hubv1.DefaultMaxBodyBytes), 1))
	for _, tc := range []struct {
		name  string
		body  []byte
		want  int
		field string
		msg   string
	}{
		{"an unknown top-level field", []byte(`{"cluster":"east","leader":{},"actions":[],"extra":1}`), 400, "extra", `unknown field "extra"`},
		{"an unknown field in an action", []byte(`{"cluster":"east","leader":{},"actions":[{"key":"k","seq":1,"bogus":true}]}`), 400, "actions[0].bogus", `unknown field "actions[0].bogus"`},
		{"an unknown field in the leader report", []byte(`{"cluster":"east","leader":{"agents":3},"actions":[]}`), 400, "leader.agents", `unknown field "leader.agents"`},
		{"another cluster's name in the body", mustJSON(t, batch("west", valid)), 400, "cluster", `must be the cluster of the path`},
		{"a wrong JSON type", []byte(`{"cluster":"east","leader":{},"actions":[{"key":"k","seq":"one"}]}`), 400, "actions[0].seq", "must be a JSON int64"},
		{"not JSON", []byte(`{"cluster":`), 400, "", "body:"},
		{"two JSON values", []byte(`{"cluster":"east","leader":{},"actions":[]} {}`), 400, "", "one JSON object"},
		{"an unknown action type", with(func(a *hubv1.Action) { a.Type = "exploded" }), 400, "actions[1].type", "must be one of applied, rolled_back, failed, healthy, blocked"},
		{"an empty key", with(func(a *hubv1.Action) { a.Key = "" }), 400, "actions[1].key", "must be 1 to 128 bytes"},
		{"a key with a space", with(func(a *hubv1.Action) { a.Key = "a b" }), 400, "actions[1].key", "printable ASCII"},
		{"a zero seq", with(func(a *hubv1.Action) { a.Seq = 0 }), 400, "actions[1].seq", "must be 1 or more"},
		{"a seq out of order in its workload", with(func(a *hubv1.Action) { a.Seq = 1; a.Key = "other" }), 400, "actions[1].seq", "send a workload's actions in order"},
		{"no time", with(func(a *hubv1.Action) { a.Time = metav1.Time{} }), 400, "actions[1].time", "must be set"},
		{"a bad namespace", with(func(a *hubv1.Action) { a.Namespace = "Shop_" }), 400, "actions[1].namespace", "must be a namespace name"},
		{"an unknown kind", with(func(a *hubv1.Action) { a.Workload.Kind = "CronJob" }), 400, "actions[1].workload.kind", "Deployment, StatefulSet, DaemonSet"},
		{"a bad resource", with(func(a *hubv1.Action) { a.Resources = []v1alpha1.ResourceName{"gpu"} }), 400, "actions[1].resources[0]", "cpu, memory"},
		{"an unknown phase", with(func(a *hubv1.Action) { a.Phase = "Exploded" }), 400, "actions[1].phase", "RolledBack"},
		{"a negative agent count", []byte(`{"cluster":"east","leader":{"agentsConnected":-1},"actions":[]}`), 400, "leader.agentsConnected", "must not be negative"},
		{"too many actions", manyJSON, 400, "actions", "at most 1000 per batch"},
		{"a time hours after the hub's clock", with(func(a *hubv1.Action) { a.Time = metav1.NewTime(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)) }), 400, "actions[1].time", "after the hub's clock"},
		{"a reason of free text", with(func(a *hubv1.Action) { a.Reason = "the node is on fire" }), 400, "actions[1].reason", "must be a CamelCase word"},
		{"an oversized body", huge, 413, "", "larger than 4194304 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", tc.body)
				require.Equal(t, tc.want, status, string(body))
				var er auditv1.Error
				require.NoError(t, json.Unmarshal(body, &er), string(body))
				assert.Equal(t, tc.field, er.Field)
				assert.Contains(t, er.Error, tc.msg)
				var page hubv1.AuditPage
				e.get(t, "/v1/audit", &page)
				assert.Empty(t, page.Items, "nothing of the batch is stored")
				var cs hubv1.ClusterList
				e.get(t, "/v1/clusters", &cs)
				assert.Nil(t, cs.Items[0].LastContact, "a refused batch is no contact")
			})
		})
	}
}

func TestAuditFiltersAndPagesStablyNewestFirst(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var east, west []hubv1.Action
		types := []v1alpha1.ActionType{v1alpha1.ActionApplied, v1alpha1.ActionRolledBack, v1alpha1.ActionHealthy}
		for i := range 30 {
			ns := []string{"shop", "blog"}[i%2]
			// Several actions share a minute, so the order's tie-breaks count.
			east = append(east, action(ns, "web", int64(i+1), types[i%3], []string{"Rollout", "OOMKills", "Healthy"}[i%3], i/3))
			west = append(west, action("shop", "api", int64(i+1), types[(i+1)%3], "Rollout", i/4))
		}
		e.write(t, "east", east...)
		e.write(t, "west", west...)

		for _, tc := range []struct {
			query string
			want  int
		}{
			{"", 60},
			{"type=rolled_back", 20},
			{"type=rolled_back,healthy", 40},
			{"type=applied&type=healthy", 40},
			{"cluster=west", 30},
			{"cluster=east&namespace=blog", 15},
			{"reason=OOMKills", 10},
			{"since=2030-03-01T12:08:00Z", 6},
			{"since=" + url.QueryEscape("2030-03-01T13:08:00+01:00"), 6},
			{"since=1h52m", 6}, // the clock is 14:00
			{"cluster=", 60},
		} {
			t.Run(tc.query, func(t *testing.T) {
				e.now = time.Date(2030, 3, 1, 14, 0, 0, 0, time.UTC)
				var whole hubv1.AuditPage
				e.get(t, "/v1/audit?limit=1000&"+tc.query, &whole)
				require.Len(t, whole.Items, tc.want)
				for i := 1; i < len(whole.Items); i++ {
					assert.False(t, whole.Items[i].Time.After(whole.Items[i-1].Time.Time), "newest first at %d", i)
				}
				var walked []hubv1.Entry
				cont := ""
				for pages := 0; ; pages++ {
					require.Less(t, pages, 100)
					var p hubv1.AuditPage
					e.get(t, "/v1/audit?limit=7&"+tc.query+"&continue="+url.QueryEscape(cont), &p)
					walked = append(walked, p.Items...)
					if p.Continue == "" {
						break
					}
					require.Len(t, p.Items, 7, "only the last page is short")
					cont = p.Continue
				}
				assert.Equal(t, messagesOf(whole.Items), messagesOf(walked), "the pages are the whole list cut")
			})
		}

		// A walk goes on where it was while new actions arrive.
		var first hubv1.AuditPage
		e.get(t, "/v1/audit?limit=10&cluster=east", &first)
		e.write(t, "east", action("shop", "web", 100, v1alpha1.ActionFailed, "NotAdopted", 59))
		var second hubv1.AuditPage
		e.get(t, "/v1/audit?limit=10&cluster=east&continue="+first.Continue, &second)
		var whole hubv1.AuditPage
		e.get(t, "/v1/audit?limit=21&cluster=east", &whole)
		assert.Equal(t, messagesOf(whole.Items[1:21]), append(messagesOf(first.Items), messagesOf(second.Items)...))
	})
}

func TestBadQueryParametersNameTheParameter(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, tc := range []struct{ path, param, msg string }{
			{"/v1/audit?type=exploded", "type", "must be one of applied, rolled_back, failed, healthy, blocked"},
			{"/v1/audit?limit=5000", "limit", "from 1 to 1000"},
			{"/v1/audit?since=yesterday", "since", "RFC 3339"},
			{"/v1/audit?since=-5m", "since", "not negative"},
			{"/v1/audit?continue=abc", "continue", "not a cursor"},
			{"/v1/audit?cluster=a&cluster=b", "cluster", "give it once"},
			{"/v1/audit?cluster=East_1", "cluster", "a cluster name"},
			{"/v1/audit?colour=red", "colour", "must be one of type, cluster"},
			{"/v1/workloads?phase=Exploded", "phase", "must be one of Pending"},
			{"/v1/workloads?continue=" + url.QueryEscape("eyJ2IjoxfQ"), "continue", "not a cursor"},
			{"/v1/clusters?x=1", "x", "this endpoint takes none"},
			{"/v1/workloads/wabc/history?limit=0", "limit", "from 1 to 1000"},
		} {
			t.Run(tc.path, func(t *testing.T) {
				status, body := e.do(t, "GET", tc.path, "reader", nil)
				require.Equal(t, http.StatusBadRequest, status, string(body))
				var er auditv1.Error
				require.NoError(t, json.Unmarshal(body, &er))
				assert.Equal(t, tc.param, er.Parameter)
				assert.Contains(t, er.Error, tc.msg)
			})
		}
	})
}

func TestWorkloadsShowPhaseAndLastActionAndHistoryByStableID(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		applied := action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0, v1alpha1.ResourceMemory)
		applied.Phase = v1alpha1.PhaseWatching
		rolled := action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 0, v1alpha1.ResourceMemory)
		rolled.Phase = v1alpha1.PhaseRolledBack // same second: seq orders them
		e.write(t, "east", applied, rolled, action("blog", "db", 1, v1alpha1.ActionApplied, "Rollout", 3))
		// A late delivery of an older action leaves the last action alone.
		e.write(t, "west", action("shop", "web", 5, v1alpha1.ActionHealthy, "Healthy", 9))
		e.write(t, "west", action("shop", "web", 4, v1alpha1.ActionApplied, "Rollout", 2))

		var page hubv1.WorkloadPage
		e.get(t, "/v1/workloads", &page)
		require.Len(t, page.Items, 3)
		names := []string{}
		for _, w := range page.Items {
			names = append(names, w.Cluster+"/"+w.Namespace+"/"+w.Name)
		}
		assert.Equal(t, []string{"east/blog/db", "east/shop/web", "west/shop/web"}, names)
		web := page.Items[1]
		assert.Equal(t, store.WorkloadID("east", "shop", v1alpha1.KindDeployment, "web"), web.ID)
		assert.Equal(t, v1alpha1.KindDeployment, web.Kind)
		assert.Equal(t, v1alpha1.PhaseRolledBack, web.Phase)
		assert.Equal(t, v1alpha1.ActionRolledBack, web.LastAction.Type)
		assert.Equal(t, v1alpha1.ActionHealthy, page.Items[2].LastAction.Type, "the newest action, not the last delivered")

		var one hubv1.WorkloadPage
		e.get(t, "/v1/workloads?limit=1&cluster=east", &one)
		require.Len(t, one.Items, 1)
		require.NotEmpty(t, one.Continue)
		var rest hubv1.WorkloadPage
		e.get(t, "/v1/workloads?limit=1&cluster=east&continue="+one.Continue, &rest)
		require.Len(t, rest.Items, 1)
		assert.Equal(t, "web", rest.Items[0].Name)
		assert.Empty(t, rest.Continue)
		var rolledBack hubv1.WorkloadPage
		e.get(t, "/v1/workloads?phase=RolledBack", &rolledBack)
		assert.Len(t, rolledBack.Items, 1)

		var h hubv1.WorkloadHistory
		e.get(t, "/v1/workloads/"+web.ID+"/history", &h)
		assert.Equal(t, web.ID, h.Workload.ID)
		assert.Equal(t, []string{rolled.Message, applied.Message}, messagesOf(h.Items))
		var h1 hubv1.WorkloadHistory
		e.get(t, "/v1/workloads/"+web.ID+"/history?limit=1", &h1)
		assert.Equal(t, []string{rolled.Message}, messagesOf(h1.Items))
		e.get(t, "/v1/workloads/"+web.ID+"/history?limit=1&continue="+h1.Continue, &h1)
		assert.Equal(t, []string{applied.Message}, messagesOf(h1.Items))
		assert.Empty(t, h1.Continue)

		status, body := e.do(t, "GET", "/v1/workloads/wnope/history", "reader", nil)
		assert.Equal(t, http.StatusNotFound, status)
		assert.Contains(t, string(body), `no workload has id \"wnope\"`)
	})
}

func TestClustersShowLastContactAndTheLeadersReport(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.store.Now = func() time.Time { return time.Date(2030, 3, 1, 12, 30, 0, 0, time.UTC) }
		b := batch("east") // a heartbeat: no actions
		b.Leader = hubv1.LeaderReport{Identity: "kerf-leader-7", AgentsConnected: 12, Undelivered: 40, LagSeconds: 95.5}
		status, body := e.do(t, "POST", "/v1/clusters/east/actions", "east", mustJSON(t, b))
		require.Equal(t, http.StatusOK, status, string(body))

		var cs hubv1.ClusterList
		e.get(t, "/v1/clusters", &cs)
		require.Len(t, cs.Items, 2)
		east, west := cs.Items[0], cs.Items[1]
		assert.Equal(t, "east", east.Name)
		require.NotNil(t, east.LastContact)
		assert.Equal(t, time.Date(2030, 3, 1, 12, 30, 0, 0, time.UTC), east.LastContact.UTC())
		assert.Equal(t, &b.Leader, east.Leader)
		assert.Equal(t, "west", west.Name)
		assert.Nil(t, west.LastContact)
		assert.Nil(t, west.Leader)
		_, err := e.store.AddCluster(context.Background(), "east")
		assert.ErrorIs(t, err, store.ErrExists)
	})
}

func TestRetentionDeletesOldActionsButNotTheCounts(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		old := action("shop", "old", 1, v1alpha1.ActionRolledBack, "OOMKills", 0, v1alpha1.ResourceMemory)
		old.Time.Time = old.Time.AddDate(-2, 0, 0)
		e.write(t, "east", old,
			action("shop", "web", 1, v1alpha1.ActionApplied, "Rollout", 0),
			action("shop", "web", 2, v1alpha1.ActionRolledBack, "OOMKills", 1, v1alpha1.ResourceMemory))
		r := &hub.Retention{Store: e.store, Keep: hub.DefaultRetention, Now: func() time.Time { return e.now }}
		n, err := r.Pass(context.Background())
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		var page hubv1.AuditPage
		e.get(t, "/v1/audit", &page)
		assert.Len(t, page.Items, 2)
		var wl hubv1.WorkloadPage
		e.get(t, "/v1/workloads", &wl)
		require.Len(t, wl.Items, 1, "a workload whose every action went goes too")
		assert.Equal(t, "web", wl.Items[0].Name)
		assert.Contains(t, metrics(t, e), `kerf_actions_total{cluster="east",reason="OOMKills",resource="memory",type="rolled_back"} 2`)
		n, err = r.Pass(context.Background())
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func metrics(t *testing.T, e *env) string {
	t.Helper()
	status, body := e.do(t, "GET", "/metrics", "reader", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	return string(body)
}

func TestMetricsCountEachActionOnceHoweverOftenDelivered(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		both := action("shop", "web", 1, v1alpha1.ActionRolledBack, "OOMKills", 0, v1alpha1.ResourceCPU, v1alpha1.ResourceMemory)
		blocked := action("shop", "web", 2, v1alpha1.ActionBlocked, "Cooldown", 1)
		for range 3 {
			e.write(t, "east", both, blocked)
		}
		e.write(t, "west", both)
		// A second hub replica on the same database serves the same counts.
		other := hub.New(e.store, quiet)
		for _, m := range []string{metrics(t, e), gatherText(t, other)} {
			for _, line := range []string{
				`kerf_actions_total{cluster="east",reason="OOMKills",resource="cpu",type="rolled_back"} 1`,
				`kerf_actions_total{cluster="east",reason="OOMKills",resource="memory",type="rolled_back"} 1`,
				`kerf_actions_total{cluster="east",reason="Cooldown",resource="",type="blocked"} 1`,
				`kerf_actions_total{cluster="west",reason="OOMKills",resource="memory",type="rolled_back"} 1`,
				`kerf_hub_metrics_read_error 0`,
			} {
				assert.Contains(t, m, line)
			}
		}
	})
}

func gatherText(t *testing.T, s *hub.Server) string {
	t.Helper()
	families, err := s.Registry.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			if len(labels) > 0 {
				fmt.Fprintf(&b, "%s{%s} %g\n", f.GetName(), strings.Join(labels, ","), v)
			} else {
				fmt.Fprintf(&b, "%s %g\n", f.GetName(), v)
			}
		}
	}
	return b.String()
}

func TestSchemaIsMigratedOnceAndReopens(t *testing.T) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			st := openStore(t, b)
			v, err := st.SchemaVersion(context.Background())
			require.NoError(t, err)
			assert.Equal(t, int64(6), v)
			assert.Equal(t, store.Dialect(b), st.Dialect())
		})
	}
	// Opening the same SQLite file again runs nothing and keeps the data.
	path := "sqlite:" + t.TempDir() + "/hub.db"
	st, err := store.Open(context.Background(), path, nil)
	require.NoError(t, err)
	_, err = st.AddCluster(context.Background(), "east")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	st, err = store.Open(context.Background(), path, nil)
	require.NoError(t, err)
	defer st.Close()
	cs, err := st.Clusters(context.Background())
	require.NoError(t, err)
	assert.Len(t, cs, 1)
	_, err = store.Open(context.Background(), "mysql://x", nil)
	assert.ErrorContains(t, err, "must start with sqlite: or postgres://")
}

// TestReplicasDeliveredTheSameBatchAtOnceStoreItOnce sends one batch to
// two hub replicas over one database, eight times at once, as a leader
// retrying against a load balancer would: every answer is 200, each
// action is stored and counted once.
func TestReplicasDeliveredTheSameBatchAtOnceStoreItOnce(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t, backend)
			second, err := store.Open(context.Background(), e.dsn, quiet)
			require.NoError(t, err)
			t.Cleanup(func() { _ = second.Close() })
			replica := hub.New(second, quiet)
			replica.Now = e.server.Now // the actions are of the env's clock
			other := httptestTLS(t, replica)
			var actions []hubv1.Action
			for i := range 50 {
				actions = append(actions, action("shop", fmt.Sprintf("w%d", i%5), int64(i/5+1), v1alpha1.ActionRolledBack, "OOMKills", i/5, v1alpha1.ResourceMemory))
			}
			body := mustJSON(t, batch("east", actions...))
			type result struct {
				status int
				res    hubv1.BatchResult
			}
			results := make(chan result, 8)
			for i := range 8 {
				go func() {
					target := *e
					if i%2 == 1 {
						target.url, target.client = other.url, other.client
					}
					req, _ := http.NewRequest("POST", target.url+"/v1/clusters/east/actions", strings.NewReader(string(body)))
					req.Header.Set("Authorization", "Bearer "+e.tokens["east"])
					resp, err := target.client.Do(req)
					if err != nil {
						results <- result{status: -1}
						return
					}
					defer resp.Body.Close()
					var r hubv1.BatchResult
					_ = json.NewDecoder(resp.Body).Decode(&r)
					results <- result{status: resp.StatusCode, res: r}
				}()
			}
			stored := 0
			for range 8 {
				r := <-results
				require.Equal(t, http.StatusOK, r.status)
				assert.Equal(t, 50, r.res.Stored+r.res.Duplicates)
				stored += r.res.Stored
			}
			assert.Equal(t, 50, stored, "each action stored by exactly one delivery")
			var page hubv1.AuditPage
			e.get(t, "/v1/audit?limit=1000", &page)
			assert.Len(t, page.Items, 50)
			assert.Contains(t, metrics(t, e), `kerf_actions_total{cluster="east",reason="OOMKills",resource="memory",type="rolled_back"} 50`)
		})
	}
}

// TestABatchOfAMillionEmptyActionsIsRefusedBeforeItIsHeld is the attack of
// issue 30, item 3: one cluster token posts a body within the size limit
// made of empty actions ("{}," each, 1.4 million in 4 MiB). Before, the
// hub decoded the whole batch, some 370 MiB live and 1 GiB at the peak
// against its 512 Mi limit, before counting it. Now it counts while it
// decodes and refuses the 1,001st action: the request allocates under
// 32 MiB in the whole test process, the client's copy of the body
// included.
func TestABatchOfAMillionEmptyActionsIsRefusedBeforeItIsHeld(t *testing.T) {
	n := (hubv1.DefaultMaxBodyBytes - 100) / 3
	body := []byte(`{"cluster":"east","leader":{},"actions":[` + strings.Repeat("{},", n) + `{}]}`)
	require.LessOrEqual(t, len(body), hubv1.DefaultMaxBodyBytes)
	each(t, func(t *testing.T, e *env) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		status, resp := e.do(t, "POST", "/v1/clusters/east/actions", "east", body)
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("a %d-byte body of %d empty actions: %d, %d MiB allocated", len(body), n+1, status, allocated>>20)
		require.Equal(t, http.StatusBadRequest, status, string(resp))
		var er auditv1.Error
		require.NoError(t, json.Unmarshal(resp, &er), string(resp))
		assert.Equal(t, "actions", er.Field)
		assert.Contains(t, er.Error, "more than 1000 actions")
		assert.Less(t, allocated, uint64(32<<20), "the batch was decoded before it was counted")
	})
}

// TestAReasonKerfDoesNotRecordIsCountedAsOther: kerf_actions_total keeps a
// label per reason for as long as the hub runs, so a writer's own reasons
// (a CamelCase word each, one per action) would grow it without bound
// (issue 30, item 11). They are counted under reason="Other"; the action
// keeps its reason.
func TestAReasonKerfDoesNotRecordIsCountedAsOther(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		var actions []hubv1.Action
		for i := range 20 {
			actions = append(actions, action("shop", "web", int64(i+1), v1alpha1.ActionBlocked, fmt.Sprintf("Invented%d", i), 0))
		}
		actions = append(actions, action("shop", "web", 21, v1alpha1.ActionBlocked, v1alpha1.ReasonWatchRunning, 0))
		e.write(t, "east", actions...)
		m := metrics(t, e)
		assert.Contains(t, m, `kerf_actions_total{cluster="east",reason="Other",resource="",type="blocked"} 20`)
		assert.Contains(t, m, `kerf_actions_total{cluster="east",reason="WatchRunning",resource="",type="blocked"} 1`)
		assert.NotContains(t, m, "Invented")
		var page hubv1.AuditPage
		e.get(t, "/v1/audit?limit=100", &page)
		assert.Contains(t, reasonsOf(page.Items), "Invented7", "the action keeps its reason")
	})
}

func reasonsOf(items []hubv1.Entry) []string {
	out := make([]string, len(items))
	for i, e := range items {
		out[i] = e.Reason
	}
	return out
}
