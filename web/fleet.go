package web

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// FleetSource reads what the Fleet page shows: the hub's clusters and their
// rollbacks over time.
type FleetSource interface {
	// Fleet returns the clusters, by name, and the rollback series.
	Fleet(ctx context.Context) (FleetData, error)
}

// FleetData is the Fleet page's content.
type FleetData struct {
	// Now is the time "ago" counts back from.
	Now time.Time
	// Clusters are the registered clusters, by name.
	Clusters []FleetCluster
	// Rollbacks counts each cluster's rollbacks per time bucket.
	Rollbacks Series
}

// FleetCluster is one cluster as the Fleet page shows it.
type FleetCluster struct {
	// Name is the cluster's registered name.
	Name string
	// LastContact is the time of its leader's last accepted write; zero
	// if it never wrote.
	LastContact time.Time
	// Reported says the leader's report below is known (it wrote once).
	Reported bool
	// Leader is the leader's identity (its pod).
	Leader string
	// AgentsConnected is how many node agents stream to its leader.
	AgentsConnected int
	// Undelivered is how many actions the leader still held for the hub.
	Undelivered int64
	// Lag is the age of the oldest undelivered action; 0 when none.
	Lag time.Duration
	// Removed is when `kerf-hub clusters remove` removed it (its actions
	// kept); zero for a cluster in service.
	Removed time.Time
	// Actions and Rollbacks count its actions, and its rollbacks, in the
	// last 24 hours.
	Actions, Rollbacks int64
	// Saved is what its stored changes saved, manifest − in force (the
	// Savings page's figures summed); nil when not known.
	Saved *Amounts
	// Recommended and Pending sum the recommended requests, and in force
	// − recommended, of the namespaces its leader's savings report names;
	// nil when it never reported.
	Recommended, Pending *Amounts
	// SavingsReported is when its leader made that report; SavingsStale
	// says it is older than the hub expects a newer one.
	SavingsReported time.Time
	SavingsStale    bool
}

// Series counts events per cluster in equal time buckets.
type Series struct {
	// Start is the first bucket's start; Step each bucket's length.
	Start time.Time
	Step  time.Duration
	// Buckets is how many buckets.
	Buckets int
	// Counts maps a cluster to its count per bucket (Buckets long); a
	// cluster without events may be absent.
	Counts map[string][]int64
	// Truncated says the source left clusters out to bound the answer.
	Truncated bool
}

// Fleet is the hub's Fleet page: every cluster with its last contact, its
// leader's report and its last day's actions, and a chart of rollbacks per
// cluster over time drawn on the server as SVG. It answers GET and HEAD.
type Fleet struct {
	// Source reads the clusters.
	Source FleetSource
	// ActivityPath is the Activity page's address, relative to this
	// page's or absolute; empty means "activity".
	ActivityPath string
	// SignOut, if set, is the address a sign-out button posts to.
	SignOut string
	// Refresh is how often the page reloads itself; zero means never.
	Refresh time.Duration
	// Log receives the Source's read errors; nil means slog.Default().
	Log *slog.Logger
}

// MaxChartClusters is the most clusters the rollback chart draws.
const MaxChartClusters = 30

// StaleAfter is how long without contact marks a cluster stale: its leader
// sends a heartbeat every minute.
const StaleAfter = 5 * time.Minute

type fleetRow struct {
	FleetCluster
	Contact, Ago, Lag string
	RemovedAt         string
	Stale, Never      bool
	ActivityHref      string
	RollbacksHref     string
	SavedCPU          string
	SavedMemory       string
	SavingsHref       string
	RecommendedCPU    string
	RecommendedMemory string
	PendingCPU        string
	PendingMemory     string
	SavingsReportedAt string
}

type multiple struct {
	Cluster string
	Href    string
	Total   int64
	Max     int64
	Bars    []bar
	Label   string
}

type bar struct {
	X, Y, H float64
	Title   string
}

type dayCol struct {
	Label, Short string
}

type dayRow struct {
	Cluster string
	Days    []int64
	Total   int64
}

type fleetView struct {
	Refresh    int
	Error      string
	Activity   string
	SignOut    string
	Now        string
	Rows       []fleetRow
	Multiples  []multiple
	Quiet      int // clusters without rollbacks in the chart's window
	Truncated  bool
	Hours      int
	Window     string // the chart's window in words: "7 days (UTC)"
	Days       []dayCol
	DayRows    []dayRow
	ChartMax   int64
	ChartStep  string
	ChartLines []float64
	ChartW     int
}

func (f *Fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s: must be GET or HEAD", r.Method), http.StatusMethodNotAllowed)
		return
	}
	view := fleetView{Activity: f.ActivityPath, SignOut: f.SignOut}
	if view.Activity == "" {
		view.Activity = "activity"
	}
	status := http.StatusOK
	data, err := f.Source.Fleet(r.Context())
	if err != nil {
		f.log().Error("fleet page cannot read the clusters", "err", err)
		status, view.Error = http.StatusServiceUnavailable, fmt.Sprintf("The clusters cannot be read now: %v. Try again shortly.", err)
		w.Header().Set("Retry-After", "5")
	} else {
		fillFleet(&view, data)
		if f.Refresh > 0 {
			view.Refresh = int(f.Refresh.Round(time.Second) / time.Second)
		}
	}
	writePage(w, status, "fleet.html", view, f.log())
}

func (f *Fleet) log() *slog.Logger {
	if f.Log == nil {
		return slog.Default()
	}
	return f.Log
}

// writePage renders a page of the hub's (fleet, sign-in) with the pages'
// security headers.
func writePage(w http.ResponseWriter, status int, name string, view any, log *slog.Logger) {
	renderPage(w, status, name, view, log, pageHeaders)
}

// pageHeaders are the security headers of every page, the leader's and the
// hub's: nothing of an audit trail read with a token is kept in a cache
// (no-store), no referrer leaves the origin, no script runs, and no form
// posts elsewhere nor does another site frame a page (clickjacking).
func pageHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", pageCSP)
}

// pageCSP is the Content-Security-Policy of every page.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// renderPage renders template name with view and writes it with status,
// its type, nosniff and the headers that headers sets; a template that
// fails answers 500 and is logged.
func renderPage(w http.ResponseWriter, status int, name string, view any, log *slog.Logger, headers func(http.Header)) {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, view); err != nil {
		log.Error("page cannot be rendered", "page", name, "err", err)
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	headers(h)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func activityHref(base string, q url.Values) string { return base + "?" + q.Encode() }

func fillFleet(v *fleetView, d FleetData) {
	now := d.Now
	if now.IsZero() {
		now = time.Now()
	}
	v.Now = now.UTC().Format("2006-01-02 15:04:05")
	for _, c := range d.Clusters {
		row := fleetRow{
			FleetCluster:  c,
			ActivityHref:  activityHref(v.Activity, url.Values{"cluster": {c.Name}}),
			RollbacksHref: activityHref(v.Activity, url.Values{"cluster": {c.Name}, "type": {"rolled_back"}, "since": {"24h"}}),
			Never:         c.LastContact.IsZero(),
			SavingsHref:   "savings?" + url.Values{"cluster": {c.Name}}.Encode(),
		}
		if c.Saved != nil {
			row.SavedCPU, row.SavedMemory = Cores(c.Saved.CPUMillis), Bytes(c.Saved.MemoryBytes)
		}
		if c.Recommended != nil && c.Pending != nil {
			row.RecommendedCPU, row.RecommendedMemory = Cores(c.Recommended.CPUMillis), Bytes(c.Recommended.MemoryBytes)
			row.PendingCPU, row.PendingMemory = Cores(c.Pending.CPUMillis), Bytes(c.Pending.MemoryBytes)
			row.SavingsReportedAt = c.SavingsReported.UTC().Format("2006-01-02 15:04")
		}
		if !row.Never {
			row.Contact = c.LastContact.UTC().Format("2006-01-02 15:04:05")
			row.Ago = ago(now.Sub(c.LastContact))
			row.Stale = now.Sub(c.LastContact) > StaleAfter && c.Removed.IsZero()
		}
		if !c.Removed.IsZero() {
			row.RemovedAt = c.Removed.UTC().Format("2006-01-02 15:04:05")
		}
		if c.Reported {
			row.Lag = "none"
			if c.Lag > 0 {
				row.Lag = span(c.Lag)
			}
		}
		v.Rows = append(v.Rows, row)
	}
	s := d.Rollbacks
	if s.Buckets < 1 || s.Step <= 0 {
		return
	}
	v.Truncated = s.Truncated
	v.Hours = int(time.Duration(s.Buckets) * s.Step / time.Hour)
	v.Window = fmt.Sprintf("%d hours (UTC)", v.Hours)
	if v.Hours%24 == 0 {
		v.Window = fmt.Sprintf("%d days (UTC)", v.Hours/24)
	}
	v.ChartStep = span(s.Step)
	if s.Step == time.Hour {
		v.ChartStep = "hour"
	}
	v.ChartW = s.Buckets
	// Day lines and the daily table: one column per 24 h from Start.
	perDay := int(24 * time.Hour / s.Step)
	if perDay < 1 {
		perDay = 1
	}
	days := (s.Buckets + perDay - 1) / perDay
	for i := range days {
		day := s.Start.Add(time.Duration(i*perDay) * s.Step).UTC()
		v.Days = append(v.Days, dayCol{Label: day.Format("Mon 2 Jan"), Short: day.Format("Mon 2")})
		if i > 0 {
			v.ChartLines = append(v.ChartLines, float64(i*perDay))
		}
	}
	for _, c := range d.Clusters {
		counts := s.Counts[c.Name]
		var total int64
		for _, n := range counts {
			total += n
			v.ChartMax = max(v.ChartMax, n)
		}
		if total == 0 {
			v.Quiet++
			continue
		}
		dr := dayRow{Cluster: c.Name, Days: make([]int64, days), Total: total}
		for i, n := range counts {
			if i < s.Buckets {
				dr.Days[i/perDay] += n
			}
		}
		v.DayRows = append(v.DayRows, dr)
	}
	for _, dr := range v.DayRows {
		if len(v.Multiples) == MaxChartClusters {
			v.Truncated = true
			break
		}
		counts := s.Counts[dr.Cluster]
		m := multiple{
			Cluster: dr.Cluster, Total: dr.Total,
			Href: activityHref(v.Activity, url.Values{"cluster": {dr.Cluster}, "type": {"rolled_back"}, "since": {fmt.Sprintf("%dh", max(v.Hours, 1))}}),
		}
		for i, n := range counts {
			if n == 0 || i >= s.Buckets {
				continue
			}
			m.Max = max(m.Max, n)
			h := 38 * float64(n) / float64(v.ChartMax)
			from := s.Start.Add(time.Duration(i) * s.Step).UTC()
			m.Bars = append(m.Bars, bar{X: float64(i) + 0.1, Y: 40 - h, H: h,
				Title: fmt.Sprintf("%s: %d from %s", dr.Cluster, n, from.Format("Mon 2 Jan 15:04"))})
		}
		m.Label = fmt.Sprintf("%s: %d rollbacks in the last %s, at most %d in one %s", dr.Cluster, dr.Total, v.Window, m.Max, v.ChartStep)
		v.Multiples = append(v.Multiples, m)
	}
}

// ago says how long ago d was, to the largest two units: "45s ago",
// "3m 20s ago", "2h 5m ago", "3d 4h ago".
func ago(d time.Duration) string {
	if d < 0 {
		return "in the future (clocks differ)"
	}
	return span(d) + " ago"
}

// span is a duration in words for people, to the largest two units.
func span(d time.Duration) string {
	d = d.Round(time.Second)
	days, d := d/(24*time.Hour), d%(24*time.Hour)
	hours, d := d/time.Hour, d%time.Hour
	mins, d := d/time.Minute, d%time.Minute
	secs := d / time.Second
	parts := []struct {
		n    time.Duration
		unit string
	}{{days, "d"}, {hours, "h"}, {mins, "m"}, {secs, "s"}}
	for i, p := range parts {
		if p.n == 0 {
			continue
		}
		out := fmt.Sprintf("%d%s", p.n, p.unit)
		if i+1 < len(parts) && parts[i+1].n > 0 {
			out += fmt.Sprintf(" %d%s", parts[i+1].n, parts[i+1].unit)
		}
		return out
	}
	return "0s"
}
