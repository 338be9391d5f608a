package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/audit"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// reader is a way the handler reads recommendations: straight from the
// apiserver, or from an informer cache as the leader does.
type reader struct {
	name string
	url  string // the handler's base URL
}

// readers serves the handler over HTTP once per reader, after the cache
// has caught up with the apiserver.
func readers(t *testing.T) []reader {
	t.Helper()
	cp := controlplane.Get(t)
	settle(t, cp)
	var out []reader
	for _, r := range []struct {
		name string
		r    client.Reader
	}{{"apiserver", cp.Client}, {"cache", env.cache}} {
		h := audit.New(r.r)
		h.Now = func() time.Time { return now }
		mux := http.NewServeMux()
		h.Register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		out = append(out, reader{r.name, srv.URL})
	}
	return out
}

// settle waits until the cache holds every recommendation at the
// resourceVersion the apiserver has.
func settle(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	versions := func(r client.Reader) map[string]string {
		var l v1alpha1.RightsizingRecommendationList
		require.NoError(t, r.List(context.Background(), &l))
		m := map[string]string{}
		for _, x := range l.Items {
			m[x.Namespace+"/"+x.Name] = x.ResourceVersion
		}
		return m
	}
	want := versions(cp.Client)
	require.Eventually(t, func() bool {
		got := versions(env.cache)
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, 10*time.Second, 20*time.Millisecond, "cache catches up with the apiserver")
}

// get fetches url and checks that the answer is JSON.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), "content type of %s", url)
	require.True(t, json.Valid(body), "body of %s is JSON: %s", url, body)
	return resp.StatusCode, body
}

func getPage(t *testing.T, url string) auditv1.Page {
	t.Helper()
	status, body := get(t, url)
	require.Equal(t, http.StatusOK, status, "GET %s: %s", url, body)
	var p auditv1.Page
	require.NoError(t, json.Unmarshal(body, &p))
	return p
}

// messages returns the messages of the fixture's items, leaving out other
// namespaces (TestCursorSurvivesHistoryTrim writes its own).
func messages(items []auditv1.Entry) []string {
	out := []string{}
	for _, e := range items {
		if e.Namespace == env.nsA || e.Namespace == env.nsB {
			out = append(out, e.Message)
		}
	}
	return out
}

func keep(msgs []string, want ...string) []string {
	out := []string{}
	for _, m := range msgs {
		if slices.Contains(want, m) {
			out = append(out, m)
		}
	}
	return out
}

func TestAuditListsEveryActionNewestFirst(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			p := getPage(t, rd.url+"/v1/audit")
			assert.Equal(t, allNewestFirst, messages(p.Items))
			assert.Empty(t, p.Continue, "one page holds them all")

			byMsg := map[string]auditv1.Entry{}
			for _, e := range p.Items {
				byMsg[e.Message] = e
			}
			web0 := byMsg["web 0"]
			assert.Equal(t, env.nsA, web0.Namespace)
			assert.Equal(t, "web", web0.Recommendation)
			assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}, web0.Workload)
			assert.Equal(t, v1alpha1.ActionApplied, web0.Type)
			assert.Equal(t, "InPlace", web0.Reason)
			assert.True(t, web0.Time.Equal(ptrTime(at(0))), "time %s", web0.Time)
			assert.Equal(t, []v1alpha1.ResourceName{"cpu", "memory"}, web0.Resources)
			require.Len(t, web0.Containers, 1)
			assert.Equal(t, "500m", web0.Containers[0].Old.Requests.CPU.String())
			assert.Equal(t, "256Mi", web0.Containers[0].New.Requests.Memory.String())
			assert.Equal(t, []string{"oomKills 2 ≥ 1"}, byMsg["web 1"].Figures)
			db1 := byMsg["db 1"]
			assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindStatefulSet, Name: "db"}, db1.Workload)
			assert.Equal(t, env.nsA, db1.Namespace)
			assert.Equal(t, env.nsB, byMsg["api 2"].Namespace)
		})
	}
}

// TestAuditEntryShape pins the JSON of an entry: every key present, lists
// empty rather than null, no HTML escaping of figures.
func TestAuditEntryShape(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			_, body := get(t, rd.url+"/v1/audit?namespace="+env.nsA+"&reason=Cooldown")
			assert.JSONEq(t, fmt.Sprintf(`{"continue":"","items":[{
				"time":"2030-03-01T12:30:00Z","type":"blocked","reason":"Cooldown","message":"web 2",
				"resources":[],"containers":[],"figures":[],
				"namespace":%q,"recommendation":"web","workload":{"kind":"Deployment","name":"web"}}]}`, env.nsA), string(body))

			_, body = get(t, rd.url+"/v1/audit?namespace="+env.nsA+"&reason=OOMKills")
			assert.Contains(t, string(body), `"figures":["oomKills 2 ≥ 1"]`)

			_, body = get(t, rd.url+"/v1/audit?reason=NoSuchReason")
			assert.JSONEq(t, `{"items":[],"continue":""}`, string(body))
		})
	}
}

func TestAuditFilters(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				query string
				want  []string
			}{
				{"one type", "type=rolled_back", []string{"api 1", "web 1"}},
				{"types comma-separated", "type=applied,blocked", keep(allNewestFirst, "api 2", "web 4", "web 3", "web 2", "api 0", "db 0", "web 0")},
				{"types repeated", "type=healthy&type=failed", []string{"web-memory 1", "db 1", "web-memory 0"}},
				{"types with spaces and an empty one", "type=healthy,+failed,", []string{"web-memory 1", "db 1", "web-memory 0"}},
				{"reason exact", "reason=OOMKills", []string{"web 1"}},
				{"reason is case-sensitive", "reason=oomkills", []string{}},
				{"namespace", "namespace=" + env.nsB, []string{"api 2", "api 1", "api 0"}},
				{"namespace with no recommendations", "namespace=default", []string{}},
				{"since a timestamp, inclusive", "since=2030-03-01T12:30:00Z", allNewestFirst[:9]},
				{"since a timestamp with an offset", "since=" + url.QueryEscape("2030-03-01T13:30:00+01:00"), allNewestFirst[:9]},
				{"since a timestamp with an unescaped +", "since=2030-03-01T13:30:00+01:00", allNewestFirst[:9]},
				{"since a duration back from now", "since=45m", []string{"api 2", "web-memory 1"}},
				{"since 0s is now", "since=0s", []string{}},
				{"filters combine", "type=applied&namespace=" + env.nsA + "&since=15m0s&since=", []string{}},
				{"filters combine and match", "type=applied&namespace=" + env.nsA + "&since=2h", []string{"web 4", "db 0", "web 0"}},
				{"empty values count as absent", "type=&reason=&namespace=&since=&limit=&continue=", allNewestFirst},
			} {
				t.Run(tc.name, func(t *testing.T) {
					p := getPage(t, rd.url+"/v1/audit?"+tc.query)
					assert.Equal(t, tc.want, messages(p.Items))
				})
			}
		})
	}
}

func TestAuditPagesWithoutGapsOrDuplicates(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, tc := range []struct {
				query string
				limit int
			}{
				{"", 1}, {"", 2}, {"", 3}, {"", 5}, {"", 7}, {"", 11}, {"", 12},
				{"type=applied,blocked&", 2},
				{"namespace=" + env.nsA + "&", 4},
			} {
				t.Run(fmt.Sprintf("%slimit=%d", tc.query, tc.limit), func(t *testing.T) {
					whole := getPage(t, fmt.Sprintf("%s/v1/audit?%slimit=%d", rd.url, tc.query, audit.MaxLimit))
					require.Empty(t, whole.Continue)
					var walked []auditv1.Entry
					cont := ""
					for pages := 0; ; pages++ {
						require.Less(t, pages, 1000, "the walk ends")
						p := getPage(t, fmt.Sprintf("%s/v1/audit?%slimit=%d&continue=%s", rd.url, tc.query, tc.limit, url.QueryEscape(cont)))
						assert.LessOrEqual(t, len(p.Items), tc.limit)
						walked = append(walked, p.Items...)
						if p.Continue == "" {
							break
						}
						assert.Len(t, p.Items, tc.limit, "a page before the last is full")
						cont = p.Continue
					}
					assert.Equal(t, whole.Items, walked, "pages put together are the whole list")
				})
			}
		})
	}
}

func TestAuditDefaultLimitIs100(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	ns, err := createNamespace(ctx, cp.Client, "kerf-audit-limit-")
	require.NoError(t, err)
	rsr := recommendation(ns, "busy", v1alpha1.KindDeployment, "busy")
	rsr.Status.History = busyHistory(100)
	rsr2 := recommendation(ns, "busy2", v1alpha1.KindDeployment, "busy2")
	rsr2.Status.History = busyHistory(5)
	scratch(t, cp, rsr, rsr2)

	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			p := getPage(t, rd.url+"/v1/audit?namespace="+ns)
			assert.Len(t, p.Items, audit.DefaultLimit)
			require.NotEmpty(t, p.Continue)
			rest := getPage(t, rd.url+"/v1/audit?namespace="+ns+"&continue="+p.Continue)
			assert.Len(t, rest.Items, 5)
			assert.Empty(t, rest.Continue)
		})
	}
}

// scratch creates recommendations outside the fixture's namespaces, waits
// until every reader has them, and deletes them when the test ends: the
// tests that read every namespace on one page then see the fixture only,
// whatever ran before them (go test -count=N).
func scratch(t *testing.T, cp *controlplane.ControlPlane, rsrs ...*v1alpha1.RightsizingRecommendation) {
	t.Helper()
	ctx := context.Background()
	for _, rsr := range rsrs {
		require.NoError(t, createRecommendation(ctx, cp.Client, rsr))
		t.Cleanup(func() {
			require.NoError(t, cp.Client.Delete(ctx, rsr))
			settle(t, cp)
		})
	}
	settle(t, cp)
}

// busyHistory is n actions a minute apart, a day before the fixture's,
// with messages "busy 0" to "busy n-1".
func busyHistory(n int) []v1alpha1.Action {
	h := make([]v1alpha1.Action, n)
	for i := range h {
		h[i] = v1alpha1.Action{Time: at(i - 24*60), Type: v1alpha1.ActionBlocked, Reason: v1alpha1.ReasonCooldown, Message: fmt.Sprintf("busy %d", i)}
	}
	return h
}

// TestCursorSurvivesHistoryTrim takes a page, lets the leader record an
// action on a recommendation whose history is full (the oldest entry is
// dropped, every index shifts), and checks that the next page starts right
// after the first, even inside a run of actions of the same second.
func TestCursorSurvivesHistoryTrim(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	busy := func(from, to int) []string {
		var out []string
		for i := from; i >= to; i-- {
			out = append(out, fmt.Sprintf("busy %d", i))
		}
		return out
	}
	msgs := func(p auditv1.Page) []string {
		var out []string
		for _, e := range p.Items {
			out = append(out, e.Message)
		}
		return out
	}
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			ns, err := createNamespace(ctx, cp.Client, "kerf-audit-trim-")
			require.NoError(t, err)
			rsr := recommendation(ns, "busy", v1alpha1.KindDeployment, "busy")
			rsr.Status.History = busyHistory(100)
			for i := 85; i < 95; i++ { // busy 85 to 94 share one second
				rsr.Status.History[i].Time = at(85 - 24*60)
			}
			scratch(t, cp, rsr)

			first := getPage(t, rd.url+"/v1/audit?limit=10&namespace="+ns)
			require.Equal(t, busy(99, 90), msgs(first), "90 to 94 are one second, newest recorded first")

			// The leader records one more action and keeps the newest 100.
			rsr.Status.History = append(rsr.Status.History[1:], v1alpha1.Action{
				Time: at(100 - 24*60), Type: v1alpha1.ActionApplied, Reason: "InPlace", Message: "new",
			})
			require.NoError(t, cp.Client.Status().Update(ctx, rsr))
			settle(t, cp)

			second := getPage(t, rd.url+"/v1/audit?limit=10&namespace="+ns+"&continue="+url.QueryEscape(first.Continue))
			assert.Equal(t, busy(89, 80), msgs(second))
			again := getPage(t, rd.url+"/v1/audit?limit=2&namespace="+ns)
			assert.Equal(t, []string{"new", "busy 99"}, msgs(again), "a fresh walk sees the new action first")
		})
	}
}

func TestAuditRefusesBadQueryNamingTheParameter(t *testing.T) {
	types := "must be one of applied, rolled_back, failed, healthy, blocked"
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, tc := range []struct {
				query     string
				wantParam string
				wantError string
			}{
				{"type=foo", "type", `type "foo": ` + types},
				{"type=applied,Applied", "type", `type "Applied": ` + types},
				{"type=applied&type=rollback", "type", `type "rollback": ` + types},
				{"limit=0", "limit", `limit "0": must be a whole number from 1 to 1000`},
				{"limit=1001", "limit", `limit "1001": must be a whole number from 1 to 1000`},
				{"limit=ten", "limit", `limit "ten": must be a whole number from 1 to 1000`},
				{"limit=1&limit=2", "limit", "limit: give it once, not 2 times"},
				{"since=yesterday", "since", `since "yesterday": must be an RFC 3339 timestamp (2006-01-02T15:04:05Z) or a duration back from now (90s, 15m, 1h30m)`},
				{"since=2030-03-01", "since", `since "2030-03-01": must be an RFC 3339 timestamp`},
				{"since=-1h", "since", `since "-1h": must be an RFC 3339 timestamp (2006-01-02T15:04:05Z) or a duration back from now (90s, 15m, 1h30m), not negative`},
				{"continue=not-a-cursor!", "continue", `continue "not-a-cursor!": not a cursor of this API`},
				{"continue=eyJ4IjoxfQ", "continue", `continue "eyJ4IjoxfQ": not a cursor of this API`},
				{"namespace=Not_A_Namespace", "namespace", `namespace "Not_A_Namespace": must be a namespace name`},
				{"namespace=a&namespace=b", "namespace", "namespace: give it once, not 2 times"},
				{"types=applied", "types", `unknown query parameter "types": must be one of type, reason, namespace, since, limit, continue`},
			} {
				t.Run(tc.query, func(t *testing.T) {
					status, body := get(t, rd.url+"/v1/audit?"+tc.query)
					assert.Equal(t, http.StatusBadRequest, status)
					var e auditv1.Error
					require.NoError(t, json.Unmarshal(body, &e))
					assert.Equal(t, tc.wantParam, e.Parameter)
					assert.Contains(t, e.Error, tc.wantError)
				})
			}
		})
	}
}

func TestAnswersOnlyGETAndHEAD(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, path := range []string{"/v1/audit", "/v1/workloads/" + env.nsA + "/Deployment/web/history"} {
				resp, err := http.Head(rd.url + path)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, "HEAD %s", path)

				for _, method := range []string{http.MethodPost, http.MethodDelete} {
					req, err := http.NewRequest(method, rd.url+path, nil)
					require.NoError(t, err)
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.NoError(t, err)
					assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", method, path)
					assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
					assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
					assert.JSONEq(t, fmt.Sprintf(`{"error":"method %s: must be GET or HEAD"}`, method), string(body))
				}
			}
		})
	}
}

// TestUnavailableUntilTheCacheStarts checks that a leader whose cache has
// not started yet answers 503 with Retry-After, not 500.
func TestUnavailableUntilTheCacheStarts(t *testing.T) {
	cp := controlplane.Get(t)
	c, err := cache.New(cp.Config, cache.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	h := audit.New(c)
	h.Log = slog.New(slog.DiscardHandler)
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/v1/audit", "/v1/workloads/" + env.nsA + "/Deployment/web/history"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", path, body)
		assert.Equal(t, "5", resp.Header.Get("Retry-After"))
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		assert.Contains(t, string(body), `"error":"list RightsizingRecommendations: `)
	}
}

func getHistory(t *testing.T, url string) auditv1.WorkloadHistory {
	t.Helper()
	status, body := get(t, url)
	require.Equal(t, http.StatusOK, status, "GET %s: %s", url, body)
	var h auditv1.WorkloadHistory
	require.NoError(t, json.Unmarshal(body, &h))
	return h
}

func TestWorkloadHistoryOfADeployment(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, kind := range []string{"Deployment", "deployment", "DEPLOYMENT"} {
				h := getHistory(t, fmt.Sprintf("%s/v1/workloads/%s/%s/web/history", rd.url, env.nsA, kind))
				assert.Equal(t, env.nsA, h.Namespace)
				assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}, h.Workload, "the kind as Kubernetes spells it")
				assert.Equal(t, []string{"web-memory 1", "web 4", "web 3", "web 2", "web-memory 0", "web 1", "web 0"}, messages(h.Items),
					"both recommendations that target web, newest first")

				require.Len(t, h.Recommendations, 2)
				web, webMemory := h.Recommendations[0], h.Recommendations[1]
				assert.Equal(t, "web", web.Name)
				assert.Equal(t, v1alpha1.PhaseWatching, web.Phase)
				assert.Equal(t, "Applied", web.Reason)
				assert.Equal(t, "watching the change applied at 13:00", web.Message)
				assert.Equal(t, &auditv1.HealthWatch{Reason: "Watching", Message: "watching for 30m"}, web.HealthWatch)
				require.NotNil(t, web.Change)
				assert.True(t, web.Change.AppliedAt.Equal(ptrTime(at(60))))
				assert.Equal(t, v1alpha1.StrategyRollout, web.Change.Strategy)
				assert.Equal(t, []v1alpha1.ResourceName{"cpu"}, web.Change.Resources)

				assert.Equal(t, "web-memory", webMemory.Name)
				assert.Equal(t, v1alpha1.PhaseHealthy, webMemory.Phase)
				assert.Equal(t, &auditv1.HealthWatch{Reason: "Healthy", Message: "no breach in 1h"}, webMemory.HealthWatch)
				assert.Nil(t, webMemory.Change)
			}
		})
	}
}

func TestWorkloadHistoryOfAStatefulSet(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			h := getHistory(t, fmt.Sprintf("%s/v1/workloads/%s/statefulset/db/history", rd.url, env.nsA))
			assert.Equal(t, auditv1.Workload{Kind: v1alpha1.KindStatefulSet, Name: "db"}, h.Workload)
			assert.Equal(t, []string{"db 1", "db 0"}, messages(h.Items))
			for _, e := range h.Items {
				assert.Equal(t, "db", e.Recommendation)
				assert.Equal(t, h.Workload, e.Workload)
			}
			require.Len(t, h.Recommendations, 1)
			db := h.Recommendations[0]
			assert.Equal(t, v1alpha1.PhaseHealthy, db.Phase)
			assert.Equal(t, &auditv1.HealthWatch{Reason: "Healthy", Message: "no breach in 20m"}, db.HealthWatch)
			require.NotNil(t, db.Change)
			assert.True(t, db.Change.AppliedAt.Equal(ptrTime(at(20))))
			assert.Equal(t, v1alpha1.StrategyDeferred, db.Change.Strategy)
			assert.Equal(t, []v1alpha1.ResourceName{"memory"}, db.Change.Resources)
		})
	}
}

func TestWorkloadHistoryBeforeKerfActed(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			status, body := get(t, fmt.Sprintf("%s/v1/workloads/%s/DaemonSet/agent/history", rd.url, env.nsB))
			require.Equal(t, http.StatusOK, status, "%s", body)
			assert.JSONEq(t, fmt.Sprintf(`{"namespace":%q,"workload":{"kind":"DaemonSet","name":"agent"},
				"recommendations":[{"name":"agent","phase":"","reason":"","message":"","healthWatch":null,"change":null}],
				"items":[]}`, env.nsB), string(body))
		})
	}
}

func TestWorkloadHistoryRefusesOrMisses(t *testing.T) {
	for _, rd := range readers(t) {
		t.Run(rd.name, func(t *testing.T) {
			for _, tc := range []struct {
				name       string
				path       string
				wantStatus int
				wantParam  string
				wantError  string
			}{
				{"no recommendation targets it", fmt.Sprintf("%s/Deployment/nope", env.nsA), http.StatusNotFound, "",
					fmt.Sprintf("no RightsizingRecommendation targets Deployment %s/nope", env.nsA)},
				{"the name is in another namespace", fmt.Sprintf("%s/Deployment/web", env.nsB), http.StatusNotFound, "",
					fmt.Sprintf("no RightsizingRecommendation targets Deployment %s/web", env.nsB)},
				{"the name is of another kind", fmt.Sprintf("%s/StatefulSet/web", env.nsA), http.StatusNotFound, "",
					fmt.Sprintf("no RightsizingRecommendation targets StatefulSet %s/web", env.nsA)},
				{"a namespace that does not exist", "nowhere/Deployment/web", http.StatusNotFound, "",
					"no RightsizingRecommendation targets Deployment nowhere/web"},
				{"unknown kind", fmt.Sprintf("%s/CronJob/web", env.nsA), http.StatusBadRequest, "kind",
					`kind "CronJob": must be one of Deployment, StatefulSet, DaemonSet (any case)`},
				{"plural kind", fmt.Sprintf("%s/deployments/web", env.nsA), http.StatusBadRequest, "kind",
					`kind "deployments": must be one of Deployment, StatefulSet, DaemonSet (any case)`},
				{"bad namespace", "Bad_NS/Deployment/web", http.StatusBadRequest, "namespace", `namespace "Bad_NS": must be a namespace name`},
				{"bad name", fmt.Sprintf("%s/Deployment/Web_1", env.nsA), http.StatusBadRequest, "name", `name "Web_1": must be a workload name`},
			} {
				t.Run(tc.name, func(t *testing.T) {
					status, body := get(t, rd.url+"/v1/workloads/"+tc.path+"/history")
					assert.Equal(t, tc.wantStatus, status, "%s", body)
					var e auditv1.Error
					require.NoError(t, json.Unmarshal(body, &e))
					assert.Equal(t, tc.wantParam, e.Parameter)
					assert.Contains(t, e.Error, tc.wantError)
				})
			}
			status, body := get(t, fmt.Sprintf("%s/v1/workloads/%s/Deployment/web/history?type=applied", rd.url, env.nsA))
			assert.Equal(t, http.StatusBadRequest, status, "a query parameter where the endpoint takes none")
			assert.Contains(t, string(body), `unknown query parameter \"type\": this endpoint takes none`)
		})
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }
