// Package web serves Kerf's web pages: server-rendered HTML from Go
// templates embedded in the binary, readable without JavaScript and at a
// phone's width. It depends only on the audit API's JSON types
// (api/audit/v1), so that the leader (one cluster, from its cache) and the
// hub (every cluster, from its database) serve the same pages, each through
// its own Source.
package web

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

//go:embed templates/*.html
var templateFS embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"changes": changes,
	"join":    joinResources,
	"utc":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"short":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },

	// The recommender's basis, on the workload page.
	"parameters": basisParameters,
	"target":     basisTarget,
	"percent":    percent,
}).ParseFS(templateFS, "templates/*.html"))

// Source reads the actions the Activity page shows. Query holds the audit
// API's query parameters (type, reason, namespace, since, limit, continue;
// see docs/audit-api.md) as the page received them; the Source checks
// them, as its JSON API does. The leader's Source is cluster/audit's
// Handler; the hub's reads its database.
type Source interface {
	// Audit returns the page of actions query selects, newest first. Bad
	// input returns an error with a Parameter() string method naming the
	// parameter at fault, which the page shows with a 400.
	Audit(ctx context.Context, query url.Values) (auditv1.Page, error)
}

// ClusterSource is a Source over several clusters, such as the hub's. For
// one, the Activity page reads through AuditClusters and, when the source
// has more than one cluster (or a cluster filter is in force), shows a
// cluster column and a cluster filter (the query parameter cluster).
type ClusterSource interface {
	Source
	// AuditClusters answers query as Audit does, with each action's
	// cluster and the clusters the filter offers.
	AuditClusters(ctx context.Context, query url.Values) (ClusterPage, error)
}

// ClusterPage is a page of actions of several clusters.
type ClusterPage struct {
	// Items are the actions, newest first, each with its cluster.
	Items []ClusterEntry
	// Continue is the next page's cursor, as in auditv1.Page.
	Continue string
	// Clusters are the names of every cluster the source has.
	Clusters []string
}

// ClusterEntry is an action and the cluster it happened in.
type ClusterEntry struct {
	// Cluster is the cluster's name.
	Cluster string
	auditv1.Entry
}

// Activity is the Activity page: the actions, newest first, with filters
// as links that can be bookmarked and a link to the next page. It answers
// GET and HEAD.
type Activity struct {
	// Source reads the actions.
	Source Source
	// Refresh is how often the first page reloads itself (a meta refresh,
	// no JavaScript); zero means never.
	Refresh time.Duration
	// Log receives the Source's read errors; nil means slog.Default().
	Log *slog.Logger
}

// filterParams are the query parameters the page keeps from link to link.
var filterParams = []string{"cluster", "type", "namespace", "reason", "since", "limit"}

// actionTypes are the types the page offers as filters.
var actionTypes = v1alpha1.ActionTypes

// sinces are the time windows the page offers as filters.
var sinces = []string{"15m", "1h", "24h", "168h"}

// link is a filter link: its text, its href, whether it is in force.
type link struct {
	Text    string
	Href    string
	Current bool
}

// row is one action as the table shows it.
type row struct {
	auditv1.Entry
	Cluster                                          string
	TypeHref, NamespaceHref, ReasonHref, ClusterHref string
}

// activityView is what the template renders.
type activityView struct {
	Refresh  int
	Error    string
	Active   []link // the filters in force, each a link that removes it
	Types    []link
	Clusters []link // the cluster filter, when the source has several
	Sinces   []link
	Rows     []row
	Next     string
	First    string
	Filtered bool
}

func (a *Activity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s: must be GET or HEAD", r.Method), http.StatusMethodNotAllowed)
		return
	}
	status := http.StatusOK
	view := activityView{}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		status, view.Error = http.StatusBadRequest, fmt.Sprintf("The address's query cannot be read: %v.", err)
		vals = url.Values{}
	}
	kept := url.Values{}
	for _, k := range filterParams {
		for _, v := range vals[k] {
			if v != "" {
				kept.Add(k, v)
			}
		}
	}
	view.First = href(kept)
	view.Filtered = len(kept) > 0
	for _, k := range filterParams {
		if k == "limit" {
			continue
		}
		for _, v := range kept[k] {
			view.Active = append(view.Active, link{Text: k + " = " + v, Href: href(without(kept, k))})
		}
	}
	for _, t := range actionTypes {
		view.Types = append(view.Types, link{Text: string(t), Href: href(with(kept, "type", string(t))), Current: kept.Get("type") == string(t)})
	}
	for _, s := range sinces {
		view.Sinces = append(view.Sinces, link{Text: "last " + s, Href: href(with(kept, "since", s)), Current: kept.Get("since") == s})
	}
	if err == nil {
		var page ClusterPage
		page, err = a.read(r.Context(), vals)
		if err != nil {
			status, view.Error = readFailure(w, a.log(), "activity", "actions", err)
		} else {
			if len(page.Clusters) > 1 || kept.Get("cluster") != "" {
				for _, c := range page.Clusters {
					view.Clusters = append(view.Clusters, link{Text: c, Href: href(with(kept, "cluster", c)), Current: kept.Get("cluster") == c})
				}
			}
			for _, e := range page.Items {
				view.Rows = append(view.Rows, row{
					Entry:         e.Entry,
					Cluster:       e.Cluster,
					ClusterHref:   href(with(kept, "cluster", e.Cluster)),
					TypeHref:      href(with(kept, "type", string(e.Type))),
					NamespaceHref: href(with(kept, "namespace", e.Namespace)),
					ReasonHref:    href(with(kept, "reason", e.Reason)),
				})
			}
			if page.Continue != "" {
				view.Next = href(with(kept, "continue", page.Continue))
			}
			if vals.Get("continue") == "" && a.Refresh > 0 {
				view.Refresh = int(a.Refresh.Round(time.Second) / time.Second)
			}
		}
	}
	renderPage(w, status, "activity.html", view, a.log(), pageHeaders)
}

// read reads the page through AuditClusters when the source has several
// clusters, else through Audit.
func (a *Activity) read(ctx context.Context, vals url.Values) (ClusterPage, error) {
	if cs, ok := a.Source.(ClusterSource); ok {
		return cs.AuditClusters(ctx, vals)
	}
	page, err := a.Source.Audit(ctx, vals)
	out := ClusterPage{Continue: page.Continue}
	for _, e := range page.Items {
		out.Items = append(out.Items, ClusterEntry{Entry: e})
	}
	return out, err
}

func (a *Activity) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// href is a relative link to the page with q, so that the page works under
// any path the leader or the hub mounts it at.
func href(q url.Values) string {
	if len(q) == 0 {
		return "?"
	}
	return "?" + q.Encode()
}

// with returns q with k set to v alone; a changed filter starts again at
// the first page.
func with(q url.Values, k, v string) url.Values {
	out := without(q, k)
	out.Set(k, v)
	return out
}

// without returns q without k, and without the paging cursor.
func without(q url.Values, k string) url.Values {
	out := url.Values{}
	for key, vs := range q {
		if key != k && key != "continue" {
			out[key] = append([]string(nil), vs...)
		}
	}
	return out
}

func joinResources(rs []v1alpha1.ResourceName) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = string(r)
	}
	return strings.Join(parts, ", ")
}

// changes describes an action's old → new values, one line per container
// and value that changed, such as "app requests memory: 512Mi → 256Mi".
func changes(cs []v1alpha1.ContainerValueChange) []string {
	var out []string
	for _, c := range cs {
		for _, kind := range []struct {
			name     string
			old, new *v1alpha1.ResourceValues
		}{{"requests", c.Old.Requests, c.New.Requests}, {"limits", c.Old.Limits, c.New.Limits}} {
			get := func(v *v1alpha1.ResourceValues, cpu bool) *resource.Quantity {
				switch {
				case v == nil:
					return nil
				case cpu:
					return v.CPU
				default:
					return v.Memory
				}
			}
			for _, res := range []struct {
				name string
				cpu  bool
			}{{"cpu", true}, {"memory", false}} {
				o, n := get(kind.old, res.cpu), get(kind.new, res.cpu)
				if o == nil && n == nil {
					continue
				}
				out = append(out, fmt.Sprintf("%s %s %s: %s → %s", c.Name, kind.name, res.name, quantity(o), quantity(n)))
			}
		}
	}
	return out
}

// quantity writes q, or "none". It formats a copy: String caches its text
// in the Quantity, and a Source's values may be shared (the leader's are
// its informer cache's own objects).
func quantity(q *resource.Quantity) string {
	if q == nil {
		return "none"
	}
	v := *q
	return v.String()
}
