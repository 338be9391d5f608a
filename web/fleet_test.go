package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/web"
)

type fleetSrc struct {
	data web.FleetData
	err  error
}

func (f fleetSrc) Fleet(context.Context) (web.FleetData, error) { return f.data, f.err }

func series(counts map[string][]int64) web.Series {
	return web.Series{Start: t0.Add(-6 * 24 * time.Hour).Truncate(24 * time.Hour), Step: time.Hour, Buckets: 168, Counts: counts}
}

func hours(at map[int]int64) []int64 {
	out := make([]int64, 168)
	for i, n := range at {
		out[i] = n
	}
	return out
}

func TestFleetShowsEachClustersContactReportAndDay(t *testing.T) {
	data := web.FleetData{Now: t0, Clusters: []web.FleetCluster{
		{Name: "east", LastContact: t0.Add(-90 * time.Second), Reported: true, Leader: "kerf-leader-0", AgentsConnected: 12, Undelivered: 40, Lag: 95 * time.Second, Actions: 7, Rollbacks: 2},
		{Name: "north", LastContact: t0.Add(-26 * time.Hour), Reported: true, Leader: "kerf-leader-1"},
		{Name: "old", LastContact: t0.Add(-48 * time.Hour), Removed: t0.Add(-47 * time.Hour)},
		{Name: "west"},
	}, Rollbacks: series(map[string][]int64{"east": hours(map[int]int64{150: 2, 151: 4}), "north": hours(map[int]int64{3: 1})})}
	status, body := get(t, &web.Fleet{Source: fleetSrc{data: data}, ActivityPath: "/ui/activity", SignOut: "/ui/signout"}, "/")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<time datetime="2030-03-01T11:58:30Z">2030-03-01 11:58:30</time><br><span>1m 30s ago</span>`)
	assert.Contains(t, body, `<span class="bad">1d 2h ago (stale)</span>`, "no contact for more than 5 minutes")
	assert.Contains(t, body, `<span>2d ago</span><br><span class="muted">removed 2030-02-27 13:00:00</span>`, "a removed cluster is not stale")
	assert.Contains(t, body, `<td data-label="Delivery lag">1m 35s</td>`)
	assert.Contains(t, body, `<td data-label="Delivery lag">none</td>`, "a report of nothing undelivered")
	assert.Contains(t, body, `<td data-label="Undelivered" class="num">40</td>`)
	assert.Contains(t, body, `<td data-label="Last contact"><span class="muted">never</span></td>`)
	assert.Contains(t, body, `<a href="/ui/activity?cluster=east" aria-label="east: its actions">east</a>`)
	assert.Contains(t, body, `href="/ui/activity?cluster=east&amp;since=24h&amp;type=rolled_back" aria-label="east: 2 rollbacks in 24 hours"`)
	assert.Contains(t, body, `<form method="post" action="/ui/signout">`)
	assert.NotContains(t, body, "http-equiv", "no refresh unless asked")

	// The chart: one row per cluster with rollbacks, on one scale.
	assert.Equal(t, 2, strings.Count(body, `<svg role="img"`))
	assert.Contains(t, body, `aria-label="east: 6 rollbacks in the last 7 days (UTC), at most 4 in one hour"`)
	assert.Contains(t, body, `<rect x="151.10" y="2.00" width="0.8" height="38.00">`, "the tallest bar is full height")
	assert.Contains(t, body, `<rect x="150.10" y="21.00" width="0.8" height="19.00">`, "half of it, half as tall")
	assert.Contains(t, body, `<rect x="3.10" y="30.50" width="0.8" height="9.50">`, "north's 1 on east's scale")
	assert.Contains(t, body, "2 clusters had none.")
	assert.Contains(t, body, `<caption>Rollbacks per cluster and day (UTC)</caption>`, "a table of the numbers")
	assert.Contains(t, body, `<tr><th scope="row">east</th><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td class="num">6</td><td class="num">6</td></tr>`)
	assert.Contains(t, body, `<li title="Fri 1 Mar">Fri 1</li></ol>`)
}

func TestFleetChartIsBounded(t *testing.T) {
	counts := map[string][]int64{}
	var cs []web.FleetCluster
	for i := range web.MaxChartClusters + 5 {
		name := fmt.Sprintf("c%02d", i)
		cs = append(cs, web.FleetCluster{Name: name})
		counts[name] = hours(map[int]int64{i: 1})
	}
	status, body := get(t, &web.Fleet{Source: fleetSrc{data: web.FleetData{Now: t0, Clusters: cs, Rollbacks: series(counts)}}}, "/")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, web.MaxChartClusters, strings.Count(body, `<svg role="img"`))
	assert.Contains(t, body, fmt.Sprintf("The chart shows the first %d clusters with rollbacks", web.MaxChartClusters))
	assert.Contains(t, body, `href="activity?cluster=c00"`, "the default Activity address is relative")
}

func TestFleetWithoutRollbacksOrClusters(t *testing.T) {
	status, body := get(t, &web.Fleet{Source: fleetSrc{data: web.FleetData{Now: t0, Rollbacks: series(nil)}}, Refresh: time.Minute}, "/")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "No clusters are registered")
	assert.Contains(t, body, "No rollbacks in the last 7 days (UTC).")
	assert.NotContains(t, body, "<svg")
	assert.Contains(t, body, `<meta http-equiv="refresh" content="60">`)
}

func TestFleetFailedReadIs503(t *testing.T) {
	status, body := get(t, &web.Fleet{Source: fleetSrc{err: errors.New("database down")}}, "/")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "The clusters cannot be read now: database down.")
}

func TestSignInFormEscapesAndPosts(t *testing.T) {
	rec := httptest.NewRecorder()
	web.WriteSignIn(rec, http.StatusUnauthorized, web.SignInForm{Action: "/ui/signin", Next: `/ui/activity?x="><script>`, Error: "Sign in to see this page.", Session: 12 * time.Hour}, nil)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	body := rec.Body.String()
	assert.NotContains(t, body, "<script>")
	assert.Contains(t, body, `<form class="signin" method="post" action="/ui/signin">`)
	assert.Contains(t, body, `<label for="token">Read token</label>`)
	assert.Contains(t, body, "a session for 12 hours")
	assert.Contains(t, rec.Header().Get("Content-Security-Policy"), "form-action 'self'")
}

// clusters is a Source over several clusters.
type clusters struct {
	fixed
	names []string
	cs    []string // each item's cluster
}

func (c *clusters) AuditClusters(ctx context.Context, q url.Values) (web.ClusterPage, error) {
	p, err := c.Audit(ctx, q)
	out := web.ClusterPage{Continue: p.Continue, Clusters: c.names}
	for i, e := range p.Items {
		out.Items = append(out.Items, web.ClusterEntry{Cluster: c.cs[i], Entry: e})
	}
	return out, err
}

func TestActivityShowsTheClusterOnlyForSeveral(t *testing.T) {
	src := &clusters{fixed: fixed{page: auditv1.Page{Items: entries()}}, names: []string{"east", "west"}, cs: []string{"west", "east"}}
	status, body := get(t, &web.Activity{Source: src}, "/?type=applied")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<th scope="col">Cluster</th>`)
	assert.Contains(t, body, `<td data-label="Cluster"><a href="?cluster=west&amp;type=applied">west</a></td>`)
	assert.Contains(t, body, `<h2>Cluster</h2>`)
	assert.Contains(t, body, `<li><a href="?cluster=east&amp;type=applied">east</a></li>`)

	status, body = get(t, &web.Activity{Source: src}, "/?cluster=east")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, url.Values{"cluster": {"east"}}, src.query, "the cluster filter reaches the source")
	assert.Contains(t, body, `<a href="?cluster=east" aria-current="page">east</a>`)
	assert.Contains(t, body, `<a href="?" aria-label="remove the filter cluster = east">`)

	one := &clusters{fixed: fixed{page: auditv1.Page{Items: entries()}}, names: []string{"east"}, cs: []string{"east", "east"}}
	_, body = get(t, &web.Activity{Source: one}, "/")
	assert.NotContains(t, body, "Cluster</th>", "one cluster: no column")
	assert.NotContains(t, body, "<h2>Cluster</h2>")

	_, body = get(t, &web.Activity{Source: &fixed{page: auditv1.Page{Items: entries()}}}, "/")
	assert.NotContains(t, body, "Cluster</th>", "the leader's page is as it was")
}
