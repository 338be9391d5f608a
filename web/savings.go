package web

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SavingsSource reads the Savings page's figures. The leader's computes
// them from its recommendations (cluster/pages.Savings); the hub's from
// the actions it stores.
type SavingsSource interface {
	// Savings returns the figures of the namespaces q selects. Rollbacks
	// and OOM kills count those in [q.From, q.To).
	Savings(ctx context.Context, q SavingsQuery) (SavingsData, error)
}

// SavingsQuery selects the Savings page's figures.
type SavingsQuery struct {
	// Namespace keeps one namespace; empty keeps every one.
	Namespace string
	// Cluster keeps one cluster on the hub; empty keeps every one.
	Cluster string
	// From and To bound the window of the rollbacks and OOM kills.
	From, To time.Time
}

// SavingsData is the Savings page's content.
type SavingsData struct {
	// Rows are the figures per namespace (per cluster and namespace on
	// the hub), sorted.
	Rows []SavingsRow
	// FromActions says the figures are the hub's: a row's requests come
	// from its cluster's latest savings report (Reported set), else from
	// the stored actions alone, with no recommended value and a manifest
	// value from before the oldest stored change.
	FromActions bool
	// Clusters are the clusters the filter offers; nil on the leader.
	Clusters []string
	// Truncated says the source read a bounded number of actions and
	// more were left out; it names the bound, as "the newest 20000".
	Truncated string
}

// SavingsRow is one namespace's figures, as cluster/savings.Namespace
// defines them.
type SavingsRow struct {
	// Cluster is the cluster's name on the hub; empty on the leader.
	Cluster string
	// Namespace is the namespace's name.
	Namespace string
	// Workloads counts the namespace's recommendations.
	Workloads int
	// Manifest, InForce and Recommended are the summed requests.
	Manifest, InForce, Recommended Amounts
	// Unrecorded counts the container requests left out of the sums.
	Unrecorded int
	// Rollbacks and OOMKills count the window's rollbacks and the OOM
	// kills that triggered them.
	Rollbacks, OOMKills int
	// Reported is when the cluster's leader reported the requests (the
	// hub); zero on the leader, and on the hub for a row from actions
	// alone, which has no recommended value.
	Reported time.Time
	// Stale says the report is older than the hub expects a newer one.
	Stale bool

	// A subtotal's or total's pending sum over the rows with a
	// recommended value, how many rows had one and how many had none.
	pending              Amounts
	reported, unreported int
}

// recommended reports whether r's Recommended is known: always on the
// leader, on the hub when a report gave it.
func (r SavingsRow) recommended(hub bool) bool { return !hub || !r.Reported.IsZero() }

// Amounts are CPU and memory requests: millicores and bytes.
type Amounts struct {
	// CPUMillis is CPU in millicores.
	CPUMillis int64
	// MemoryBytes is memory in bytes.
	MemoryBytes int64
}

func (a Amounts) minus(b Amounts) Amounts {
	return Amounts{CPUMillis: a.CPUMillis - b.CPUMillis, MemoryBytes: a.MemoryBytes - b.MemoryBytes}
}

func (a Amounts) plus(b Amounts) Amounts {
	return Amounts{CPUMillis: a.CPUMillis + b.CPUMillis, MemoryBytes: a.MemoryBytes + b.MemoryBytes}
}

// SavingsWindows are the windows the page offers for its rollbacks and
// OOM kills (the query parameter since), the first the default: the
// savings metrics' and `kubectl kerf status --summary`'s 24 hours.
var SavingsWindows = []struct {
	Since string
	Text  string
	Span  time.Duration
}{{"24h", "last 24 hours", 24 * time.Hour}, {"168h", "last 7 days", 7 * 24 * time.Hour}, {"720h", "last 30 days", 30 * 24 * time.Hour}}

// Savings is the Savings page: per namespace, the CPU and memory requests
// of the manifests, in force and recommended, what Kerf saved, and the
// rollbacks and OOM kills of a window. It answers GET and HEAD.
type Savings struct {
	// Source reads the figures.
	Source SavingsSource
	// ActivityPath is the Activity page's address; empty means "activity".
	ActivityPath string
	// Refresh is how often the page reloads itself; zero means never.
	Refresh time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives the Source's read errors; nil means slog.Default().
	Log *slog.Logger
}

// savingsCell is one figure of a row: its label (for a phone's width and
// the tests), its text, and its exact value in the cell's title.
type savingsCell struct {
	Label, Text, Title string
	Negative           bool
}

// savingsRowView is one row of the table.
type savingsRowView struct {
	Cluster, Namespace              string
	Subtotal, Total, ShowCluster    bool
	NamespaceHref, ClusterHref      string
	Workloads                       int
	Cells                           []savingsCell // CPU then memory: manifest, in force, recommended, saved, pending
	Unrecorded, Rollbacks, OOMKills int
	// Reported, on the hub, is when the row's figures were reported (""
	// for a row from actions alone, and for the total); Stale marks it
	// old; Unreported counts a subtotal's or total's rows without one.
	Reported, ReportedTitle string
	Stale                   bool
	Unreported              int
}

type savingsView struct {
	Refresh     int
	Error       string
	Activity    string
	Window      string
	Windows     []link
	Clusters    []link
	Active      []link
	Rows        []savingsRowView
	Total       *savingsRowView
	FromActions bool
	ShowCluster bool
	Truncated   string
	From, To    string
}

func (s *Savings) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s: must be GET or HEAD", r.Method), http.StatusMethodNotAllowed)
		return
	}
	view := savingsView{Activity: s.ActivityPath}
	if view.Activity == "" {
		view.Activity = "activity"
	}
	status := http.StatusOK
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		renderPage(w, http.StatusBadRequest, "savings.html", savingsView{Activity: view.Activity, Error: fmt.Sprintf("The address's query cannot be read: %v.", err)}, s.log(), pageHeaders)
		return
	}
	kept := url.Values{}
	for _, k := range []string{"cluster", "namespace", "since"} {
		if v := vals.Get(k); v != "" {
			kept.Set(k, v)
		}
	}
	window := SavingsWindows[0]
	found := kept.Get("since") == ""
	for _, wd := range SavingsWindows {
		if kept.Get("since") == wd.Since {
			window, found = wd, true
		}
		view.Windows = append(view.Windows, link{Text: wd.Text, Href: href(with(kept, "since", wd.Since)), Current: wd == window})
	}
	for _, k := range []string{"cluster", "namespace"} {
		if v := kept.Get(k); v != "" {
			view.Active = append(view.Active, link{Text: k + " = " + v, Href: href(without(kept, k))})
		}
	}
	view.Window = window.Text
	if !found {
		status, view.Error = http.StatusBadRequest, fmt.Sprintf("The filter since is not valid: %q: must be 24h, 168h or 720h.", kept.Get("since"))
		renderPage(w, status, "savings.html", view, s.log(), pageHeaders)
		return
	}
	to := s.now().UTC()
	from := to.Add(-window.Span)
	view.From, view.To = from.Format("2006-01-02 15:04"), to.Format("2006-01-02 15:04")
	data, err := s.Source.Savings(r.Context(), SavingsQuery{Namespace: kept.Get("namespace"), Cluster: kept.Get("cluster"), From: from, To: to})
	if err != nil {
		status, view.Error = readFailure(w, s.log(), "savings", "figures", err)
	} else {
		fillSavings(&view, data, kept)
		if s.Refresh > 0 {
			view.Refresh = int(s.Refresh.Round(time.Second) / time.Second)
		}
	}
	renderPage(w, status, "savings.html", view, s.log(), pageHeaders)
}

func (s *Savings) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s *Savings) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// fillSavings lays data out: the rows, a subtotal per cluster when the
// source has several, and the total.
func fillSavings(v *savingsView, d SavingsData, kept url.Values) {
	v.FromActions, v.Truncated = d.FromActions, d.Truncated
	v.ShowCluster = d.Clusters != nil
	if v.ShowCluster {
		for _, c := range d.Clusters {
			v.Clusters = append(v.Clusters, link{Text: c, Href: href(with(kept, "cluster", c)), Current: kept.Get("cluster") == c})
		}
	}
	var total, sub SavingsRow
	flush := func() {
		if v.ShowCluster && sub.Cluster != "" {
			row := savingsRowOf(sub, d.FromActions, true, true)
			row.Subtotal, row.ClusterHref = true, href(with(kept, "cluster", sub.Cluster))
			v.Rows = append(v.Rows, row)
		}
	}
	for i, r := range d.Rows {
		if i == 0 || r.Cluster != d.Rows[i-1].Cluster {
			flush()
			sub = SavingsRow{Cluster: r.Cluster}
		}
		sub = sumRows(sub, r, d.FromActions)
		total = sumRows(total, r, d.FromActions)
		row := savingsRowOf(r, d.FromActions, v.ShowCluster, false)
		row.NamespaceHref = href(with(kept, "namespace", r.Namespace))
		if v.ShowCluster {
			row.NamespaceHref = href(with(with(kept, "cluster", r.Cluster), "namespace", r.Namespace))
		}
		v.Rows = append(v.Rows, row)
	}
	flush()
	t := savingsRowOf(total, d.FromActions, v.ShowCluster, true)
	t.Reported, t.ReportedTitle, t.Stale = "", "", false
	t.Total = true
	v.Total = &t
}

// sumRows adds r's figures to into's. Recommended and pending sum the
// rows that have them; the others are counted in unreported. A subtotal
// takes its cluster's report time (one report per cluster).
func sumRows(into, r SavingsRow, hub bool) SavingsRow {
	into.Workloads += r.Workloads
	into.Manifest = into.Manifest.plus(r.Manifest)
	into.InForce = into.InForce.plus(r.InForce)
	if r.recommended(hub) {
		into.Recommended = into.Recommended.plus(r.Recommended)
		into.pending = into.pending.plus(r.InForce.minus(r.Recommended))
		into.reported++
		if r.Reported.After(into.Reported) {
			into.Reported, into.Stale = r.Reported, r.Stale
		}
	} else {
		into.unreported++
	}
	into.Unrecorded += r.Unrecorded
	into.Rollbacks += r.Rollbacks
	into.OOMKills += r.OOMKills
	return into
}

// savingsRowOf is r as the table shows it. On the hub (hub true) a row
// without a report shows no recommended or pending value; a sum (sum
// true) shows those of the rows that have them.
func savingsRowOf(r SavingsRow, hub, showCluster, sum bool) savingsRowView {
	saved, pending := r.Manifest.minus(r.InForce), r.InForce.minus(r.Recommended)
	known := r.recommended(hub)
	if sum {
		pending, known = r.pending, !hub || r.reported > 0
	}
	out := savingsRowView{Cluster: r.Cluster, Namespace: r.Namespace, ShowCluster: showCluster, Workloads: r.Workloads, Unrecorded: r.Unrecorded, Rollbacks: r.Rollbacks, OOMKills: r.OOMKills, Stale: r.Stale}
	if sum {
		out.Unreported = r.unreported
	}
	if hub && !r.Reported.IsZero() {
		out.Reported, out.ReportedTitle = r.Reported.UTC().Format("2006-01-02 15:04"), r.Reported.UTC().Format(time.RFC3339)
	}
	figures := []struct {
		label string
		a     Amounts
	}{{"manifest", r.Manifest}, {"in force", r.InForce}, {"recommended", r.Recommended}, {"saved", saved}, {"pending", pending}}
	for _, cpu := range []bool{true, false} {
		for _, f := range figures {
			if !known && (f.label == "recommended" || f.label == "pending") {
				label := "CPU " + f.label
				if !cpu {
					label = "Memory " + f.label
				}
				out.Cells = append(out.Cells, savingsCell{Label: label, Text: "—", Title: "no savings report from this cluster's leader"})
				continue
			}
			if cpu {
				out.Cells = append(out.Cells, savingsCell{Label: "CPU " + f.label, Text: Cores(f.a.CPUMillis), Title: fmt.Sprintf("%d millicores", f.a.CPUMillis), Negative: f.a.CPUMillis < 0})
			} else {
				out.Cells = append(out.Cells, savingsCell{Label: "Memory " + f.label, Text: Bytes(f.a.MemoryBytes), Title: fmt.Sprintf("%d bytes", f.a.MemoryBytes), Negative: f.a.MemoryBytes < 0})
			}
		}
	}
	return out
}

// Cores writes millicores for people: "250m" below a core, else cores
// to two decimals ("1.25"); negative values with a minus sign.
func Cores(millis int64) string {
	sign, v := signOf(millis)
	if v < 1000 {
		return sign + strconv.FormatInt(v, 10) + "m"
	}
	return sign + twoDecimals(float64(v)/1000)
}

// Bytes writes bytes for people in Gi, Mi or Ki to two decimals ("1.5Gi",
// "384Mi"); negative values with a minus sign.
func Bytes(b int64) string {
	sign, v := signOf(b)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if v >= u.size {
			return sign + twoDecimals(float64(v)/float64(u.size)) + u.suffix
		}
	}
	return sign + strconv.FormatInt(v, 10)
}

// signOf splits v into a sign ("−" or "") and its absolute value.
func signOf(v int64) (string, int64) {
	if v < 0 {
		return "−", -v
	}
	return "", v
}

// twoDecimals writes f rounded to two decimals, without trailing zeros.
func twoDecimals(f float64) string {
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}
