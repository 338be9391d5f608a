package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/web"
)

// fixed is a Source that answers with one page and records the query.
type fixed struct {
	page  auditv1.Page
	err   error
	query url.Values
}

func (f *fixed) Audit(_ context.Context, q url.Values) (auditv1.Page, error) {
	f.query = q
	return f.page, f.err
}

type paramErr struct{}

func (paramErr) Error() string     { return `type "nope": must be one of applied, rolled_back` }
func (paramErr) Parameter() string { return "type" }

var t0 = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)

func entries() []auditv1.Entry {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	return []auditv1.Entry{
		{Time: metav1.NewTime(t0.Add(10 * time.Minute)), Type: v1alpha1.ActionRolledBack, Reason: "OOMKills",
			Message: `<script>alert("x")</script>`, Resources: []v1alpha1.ResourceName{"memory"},
			Figures: []string{"oomKills 2 ≥ 1"}, Namespace: "shop", Recommendation: "web-rsr",
			Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"},
			Containers: []v1alpha1.ContainerValueChange{{Name: "app",
				Old: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("256Mi")}},
				New: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{Memory: q("512Mi")}}}}},
		{Time: metav1.NewTime(t0), Type: v1alpha1.ActionApplied, Reason: "InPlace", Message: "applied 250m",
			Resources: []v1alpha1.ResourceName{"cpu"}, Namespace: "shop", Recommendation: "web-rsr",
			Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}},
	}
}

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + target)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	return resp.StatusCode, string(body)
}

func TestActivityRendersNewestFirstEscaped(t *testing.T) {
	src := &fixed{page: auditv1.Page{Items: entries()}}
	status, body := get(t, &web.Activity{Source: src, Refresh: 30 * time.Second}, "/")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<html lang="en">`)
	assert.Contains(t, body, `<th scope="col">Namespace</th>`)
	assert.Contains(t, body, `<meta http-equiv="refresh" content="30">`)
	assert.NotContains(t, body, "<script>", "a hostile message is escaped")
	assert.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	assert.Contains(t, body, "app requests memory: 256Mi → 512Mi")
	assert.Contains(t, body, "oomKills 2 ≥ 1")
	assert.Contains(t, body, `<time datetime="2030-03-01T12:10:00Z">2030-03-01 12:10:00</time>`)
	assert.Less(t, strings.Index(body, "OOMKills"), strings.Index(body, "applied 250m"), "newest first")
	assert.NotContains(t, body, `rel="next"`, "one page: no next link")
}

func TestActivityFilterLinksKeepTheOtherFilters(t *testing.T) {
	src := &fixed{page: auditv1.Page{Items: entries()}}
	status, body := get(t, &web.Activity{Source: src}, "/?since=1h&namespace=shop")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, url.Values{"since": {"1h"}, "namespace": {"shop"}}, src.query, "the filters reach the source")
	assert.NotContains(t, body, "http-equiv", "no refresh unless asked")
	// A type link adds the type to the filters in force.
	assert.Contains(t, body, `href="?namespace=shop&amp;since=1h&amp;type=rolled_back"`)
	assert.Contains(t, body, `href="?namespace=shop&amp;reason=OOMKills&amp;since=1h"`)
	// Each filter in force has a link that removes it, and only it.
	assert.Contains(t, body, `<a href="?namespace=shop" aria-label="remove the filter since = 1h">`)
	assert.Contains(t, body, `<a href="?since=1h" aria-label="remove the filter namespace = shop">`)
	assert.Contains(t, body, `<a href="?namespace=shop&amp;since=1h" aria-current="page">last 1h</a>`)
}

func TestActivityNextLinkCarriesTheCursorAndFilters(t *testing.T) {
	src := &fixed{page: auditv1.Page{Items: entries(), Continue: "abc+/="}}
	status, body := get(t, &web.Activity{Source: src, Refresh: time.Minute}, "/?type=applied&continue=old")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `<a href="?continue=abc%2B%2F%3D&amp;type=applied" rel="next">`)
	assert.Contains(t, body, `<a href="?type=applied">Newest</a>`, "back to the first page, cursor dropped")
	assert.Contains(t, body, `href="?namespace=shop&amp;type=applied"`, "a filter link starts again at the first page")
	assert.NotContains(t, body, "http-equiv", "a later page does not reload itself")
}

func TestActivityBadFilterIs400NamingIt(t *testing.T) {
	status, body := get(t, &web.Activity{Source: &fixed{err: paramErr{}}}, "/?type=nope")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `role="alert"`)
	assert.Contains(t, body, "The filter type is not valid: type &#34;nope&#34;")
	assert.Contains(t, body, `remove the filter type = nope`)
}

func TestActivityFailedReadIs503(t *testing.T) {
	status, body := get(t, &web.Activity{Source: &fixed{err: errors.New("cache not started")}}, "/")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "The actions cannot be read now: cache not started.")
}

func TestActivityAnswersOnlyGETAndHEAD(t *testing.T) {
	srv := httptest.NewServer(&web.Activity{Source: &fixed{}})
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}

func TestActivityEmpty(t *testing.T) {
	status, body := get(t, &web.Activity{Source: &fixed{}}, "/?reason=Cooldown")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "No actions match the filters.")
}
