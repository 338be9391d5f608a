package web

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Chart is one panel of a container's chart: one resource's request and
// limit over time as step lines, its usage as a line, and the OOM kills,
// throttling and rollbacks where they happened. Values are millicores for
// cpu and bytes for memory.
type Chart struct {
	// ID is unique on the page, for the SVG's labels.
	ID string
	// Container is the container's name.
	Container string
	// Resource is cpu or memory.
	Resource v1alpha1.ResourceName
	// From and To are the time axis.
	From, To time.Time
	// Request and Limit are the values in force from each step's time on;
	// a NaN value is none set.
	Request, Limit []Step
	// Usage is the usage line; NaN values are gaps.
	Usage []Sample
	// Step is the span of one usage point.
	Step time.Duration
	// Marks are OOM kills and rollbacks; Bands are throttled spans.
	Marks []Mark
	Bands []Band
	// Max is the top of the value axis; Tick the step of its gridlines.
	Max, Tick float64
}

// Step is a value in force from At until the next step.
type Step struct {
	At    time.Time
	Value float64
}

// Sample is a usage reading.
type Sample struct {
	At    time.Time
	Value float64
}

// MarkKind says what a Mark is.
type MarkKind string

// The kinds of marks.
const (
	// MarkOOM is an OOM kill the agents reported.
	MarkOOM MarkKind = "oom"
	// MarkRollback is a rolled_back action.
	MarkRollback MarkKind = "rollback"
	// MarkApplied is an applied action.
	MarkApplied MarkKind = "applied"
)

// Mark is something that happened at a time.
type Mark struct {
	At   time.Time
	Kind MarkKind
	Text string
}

// Band is a span of throttling.
type Band struct {
	From, To time.Time
	Percent  int
}

// chartWindow is the shortest time axis: a page whose events all happened
// within it still shows some context before them.
const chartWindow = time.Hour

// buildCharts makes each container's CPU and memory panels from the view:
// the steps from the history's old → new values (the manifest's values
// where the history never touched one), the usage and its OOM kills and
// throttling from the Source's series, the rollbacks from the history.
func buildCharts(v WorkloadView) []containerCharts {
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, c := range v.Containers {
		add(c.Name)
	}
	for _, e := range v.History {
		for _, c := range e.Containers {
			add(c.Name)
		}
	}
	for _, u := range v.Usage {
		add(u.Container)
	}
	to := v.Now.UTC()
	from := to
	for _, e := range v.History {
		from = minTime(from, e.Time.Time)
	}
	for _, u := range v.Usage {
		if len(u.Points) > 0 {
			from = minTime(from, u.Points[0].At)
		}
	}
	if to.Sub(from) < chartWindow {
		from = to.Add(-chartWindow)
	}
	span := to.Sub(from)
	from, to = from.Add(-span/40), to.Add(span/40)
	var out []containerCharts
	for i, name := range names {
		cc := containerCharts{Name: name}
		for _, res := range []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory} {
			ch := &Chart{ID: fmt.Sprintf("chart-%d-%s", i, res), Container: name, Resource: res, From: from, To: to}
			ch.Request = steps(v, name, res, false)
			ch.Limit = steps(v, name, res, true)
			for _, u := range v.Usage {
				if u.Container == name {
					ch.usage(u)
				}
			}
			for _, e := range v.History {
				ch.action(e)
			}
			ch.scale()
			if res == v1alpha1.ResourceCPU {
				cc.CPU = ch
			} else {
				cc.Memory = ch
			}
		}
		out = append(out, cc)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// steps is a field's values over time: before the first action that
// touched it, that action's old value; from each applied or rolled_back
// action on, its new value. A field no action touched has the manifest's
// value throughout, when it is known.
func steps(v WorkloadView, container string, res v1alpha1.ResourceName, limit bool) []Step {
	var out []Step
	for _, e := range v.History {
		if e.Type != v1alpha1.ActionApplied && e.Type != v1alpha1.ActionRolledBack {
			continue
		}
		if len(e.Resources) > 0 && !slices.Contains(e.Resources, res) {
			continue
		}
		for _, c := range e.Containers {
			if c.Name != container {
				continue
			}
			if len(out) == 0 {
				out = append(out, Step{Value: field(&c.Old, res, limit)})
			}
			out = append(out, Step{At: e.Time.Time, Value: field(&c.New, res, limit)})
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, c := range v.Containers {
		if c.Name == container && c.Manifest != nil {
			if f := field(c.Manifest, res, limit); !math.IsNaN(f) {
				return []Step{{Value: f}}
			}
		}
	}
	return nil
}

// field is one value of r in millicores or bytes, NaN when not set.
func field(r *v1alpha1.Resources, res v1alpha1.ResourceName, limit bool) float64 {
	vals := r.Requests
	if limit {
		vals = r.Limits
	}
	if vals == nil {
		return math.NaN()
	}
	q := vals.Memory
	if res == v1alpha1.ResourceCPU {
		q = vals.CPU
	}
	if q == nil {
		return math.NaN()
	}
	if res == v1alpha1.ResourceCPU {
		return float64(q.MilliValue())
	}
	return float64(q.Value())
}

// usage adds a series' points within the axis, its OOM kills (memory) and
// its throttling (cpu).
func (ch *Chart) usage(u ContainerUsage) {
	ch.Step = u.Step
	if ch.Step <= 0 {
		ch.Step = time.Minute
	}
	for _, p := range u.Points {
		if p.At.Before(ch.From) || p.At.After(ch.To) {
			continue
		}
		val := p.MemoryBytes
		if ch.Resource == v1alpha1.ResourceCPU {
			val = p.CPUMilli
		}
		s := Sample{At: p.At, Value: math.NaN()}
		if val >= 0 {
			s.Value = float64(val)
		}
		ch.Usage = append(ch.Usage, s)
		switch {
		case ch.Resource == v1alpha1.ResourceMemory && p.OOMKills > 0:
			text := fmt.Sprintf("%d OOM kill%s in the minute from %s UTC", p.OOMKills, plural(p.OOMKills), p.At.UTC().Format("15:04"))
			ch.Marks = append(ch.Marks, Mark{At: p.At.Add(ch.Step / 2), Kind: MarkOOM, Text: text})
		case ch.Resource == v1alpha1.ResourceCPU && p.ThrottledPercent > 0:
			ch.Bands = append(ch.Bands, Band{From: p.At, To: p.At.Add(ch.Step), Percent: p.ThrottledPercent})
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// action marks an applied or rolled_back action that touched the chart's
// resource.
func (ch *Chart) action(e auditv1.Entry) {
	if len(e.Resources) > 0 && !slices.Contains(e.Resources, ch.Resource) {
		return
	}
	switch e.Type {
	case v1alpha1.ActionRolledBack:
		text := "rolled back"
		if e.Reason != "" {
			text += " (" + e.Reason + ")"
		}
		if len(e.Figures) > 0 {
			text += ": " + strings.Join(e.Figures, ", ")
		}
		ch.Marks = append(ch.Marks, Mark{At: e.Time.Time, Kind: MarkRollback, Text: text + " at " + e.Time.UTC().Format("15:04:05") + " UTC"})
	case v1alpha1.ActionApplied:
		ch.Marks = append(ch.Marks, Mark{At: e.Time.Time, Kind: MarkApplied, Text: "applied at " + e.Time.UTC().Format("15:04:05") + " UTC"})
	}
}

// scale sets Max: a round number above every value.
func (ch *Chart) scale() {
	top := 0.0
	for _, s := range slices.Concat(ch.Request, ch.Limit) {
		if !math.IsNaN(s.Value) {
			top = max(top, s.Value)
		}
	}
	for _, s := range ch.Usage {
		if !math.IsNaN(s.Value) {
			top = max(top, s.Value)
		}
	}
	if top <= 0 {
		// Nothing to scale by: one core, or 1 Gi.
		top = 1000
		if ch.Resource == v1alpha1.ResourceMemory {
			top = 1 << 30
		}
	}
	top *= 1.1
	ch.Tick = niceStep(ch.Resource, top/4)
	ch.Max = ch.Tick * math.Ceil(top/ch.Tick)
}

// niceStep is the tick step at or above raw: 1, 2 or 5 × 10ⁿ millicores,
// or a power of two of bytes (at least 1 Mi).
func niceStep(res v1alpha1.ResourceName, raw float64) float64 {
	if res == v1alpha1.ResourceMemory {
		s := float64(1 << 20)
		for s < raw {
			s *= 2
		}
		return s
	}
	if raw <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// Format writes a value as Kubernetes does: millicores or cores for cpu,
// Ki, Mi or Gi for memory; "none" for NaN.
func (ch *Chart) Format(v float64) string {
	return formatValue(ch.Resource, v)
}

func formatValue(res v1alpha1.ResourceName, v float64) string {
	if math.IsNaN(v) {
		return "none"
	}
	if res == v1alpha1.ResourceCPU {
		if v < 1000 || math.Mod(v, 100) != 0 {
			return strconv.FormatFloat(math.Round(v), 'f', -1, 64) + "m"
		}
		return strconv.FormatFloat(v/1000, 'f', -1, 64)
	}
	for _, u := range []struct {
		unit string
		size float64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if v >= u.size {
			return strconv.FormatFloat(math.Round(v/u.size*10)/10, 'f', -1, 64) + u.unit
		}
	}
	return resource.NewQuantity(int64(v), resource.BinarySI).String()
}

func (ch *Chart) resourceName() string {
	if ch.Resource == v1alpha1.ResourceCPU {
		return "CPU"
	}
	return "Memory"
}

// Title names the panel, with its unit.
func (ch *Chart) Title() string {
	if ch.Resource == v1alpha1.ResourceCPU {
		return "CPU (cores; m = millicores)"
	}
	return "Memory (bytes; Mi = 2²⁰)"
}

// Label is the panel's text alternative: what the SVG shows, in words.
func (ch *Chart) Label() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of container %s from %s to %s UTC.", ch.resourceName(), ch.Container,
		ch.From.UTC().Format("2006-01-02 15:04"), ch.To.UTC().Format("2006-01-02 15:04"))
	for _, f := range []struct {
		name  string
		steps []Step
	}{{"request", ch.Request}, {"limit", ch.Limit}} {
		if len(f.steps) == 0 {
			continue
		}
		vals := make([]string, len(f.steps))
		for i, s := range f.steps {
			vals[i] = ch.Format(s.Value)
		}
		fmt.Fprintf(&b, " The %s went %s.", f.name, strings.Join(vals, " → "))
	}
	peak := math.NaN()
	for _, s := range ch.Usage {
		if !math.IsNaN(s.Value) && (math.IsNaN(peak) || s.Value > peak) {
			peak = s.Value
		}
	}
	if !math.IsNaN(peak) {
		fmt.Fprintf(&b, " Usage peaked at %s.", ch.Format(peak))
	} else {
		b.WriteString(" No usage is recorded.")
	}
	counts := map[MarkKind]int{}
	for _, m := range ch.Marks {
		counts[m.Kind]++
	}
	if n := counts[MarkOOM]; n > 0 {
		fmt.Fprintf(&b, " %d OOM kill mark%s.", n, plural(n))
	}
	if n := len(ch.Bands); n > 0 {
		fmt.Fprintf(&b, " Throttled in %d minute%s.", n, plural(n))
	}
	if n := counts[MarkRollback]; n > 0 {
		fmt.Fprintf(&b, " %d rollback%s.", n, plural(n))
	}
	return b.String()
}

// The panel's geometry, in SVG user units.
const (
	chartW, chartH        = 480.0, 220.0
	padLeft, padRight     = 64.0, 12.0
	padTop, padBottom     = 14.0, 42.0
	plotW, plotH          = chartW - padLeft - padRight, chartH - padTop - padBottom
	plotRight, plotBottom = padLeft + plotW, padTop + plotH
	markTop               = padTop
)

func (ch *Chart) x(t time.Time) float64 {
	span := ch.To.Sub(ch.From)
	if span <= 0 {
		return padLeft
	}
	f := float64(t.Sub(ch.From)) / float64(span)
	return padLeft + min(max(f, 0), 1)*plotW
}

func (ch *Chart) y(v float64) float64 {
	return plotBottom - min(max(v/ch.Max, 0), 1)*plotH
}

func num(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

// SVG draws the panel. Every text is escaped; the result is well-formed
// XML.
func (ch *Chart) SVG() template.HTML {
	esc := template.HTMLEscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" role="img" aria-label="%s" class="chart" font-size="14">`,
		num(chartW), num(chartH), esc(ch.Label()))
	// Throttled spans, under everything.
	for _, bd := range ch.Bands {
		x0, x1 := ch.x(bd.From), ch.x(bd.To)
		// The more periods throttled, the darker the band.
		fmt.Fprintf(&b, `<rect class="throttled" x="%s" y="%s" width="%s" height="%s" fill-opacity="%s"><title>%s</title></rect>`,
			num(x0), num(padTop), num(max(x1-x0, 1.5)), num(plotH), strconv.FormatFloat(0.2+0.6*float64(min(bd.Percent, 100))/100, 'f', 2, 64),
			esc(fmt.Sprintf("throttled %d%% of CFS periods in the minute from %s UTC", bd.Percent, bd.From.UTC().Format("15:04"))))
	}
	// Value axis: gridlines and labels.
	for i := 0.0; i*ch.Tick <= ch.Max*1.0001; i++ {
		v := ch.Tick * i
		y := ch.y(v)
		fmt.Fprintf(&b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(padLeft), num(y), num(plotRight), num(y))
		fmt.Fprintf(&b, `<text class="axis" x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`, num(padLeft-6), num(y), esc(ch.Format(v)))
	}
	// Time axis.
	fmt.Fprintf(&b, `<line class="axis-line" x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(padLeft), num(plotBottom), num(plotRight), num(plotBottom))
	every, layout := timeTicks(ch.To.Sub(ch.From))
	for t := ch.From.UTC().Truncate(every).Add(every); !t.After(ch.To); t = t.Add(every) {
		x := ch.x(t)
		fmt.Fprintf(&b, `<line class="tick" x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(x), num(plotBottom), num(x), num(plotBottom+4))
		fmt.Fprintf(&b, `<text class="axis" x="%s" y="%s" text-anchor="middle">%s</text>`, num(x), num(plotBottom+19), esc(t.Format(layout)))
	}
	fmt.Fprintf(&b, `<text class="axis" x="%s" y="%s" text-anchor="end">time (UTC)</text>`, num(plotRight), num(chartH-3))
	// Requests and limits, then usage.
	ch.stepPath(&b, "request", ch.Request)
	ch.stepPath(&b, "limit", ch.Limit)
	if d := ch.usagePath(); d != "" {
		fmt.Fprintf(&b, `<path class="usage" d="%s"><title>usage</title></path>`, d)
	}
	// Marks on top.
	for _, m := range ch.Marks {
		x := ch.x(m.At)
		switch m.Kind {
		case MarkOOM:
			fmt.Fprintf(&b, `<g class="mark oom"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s"/><path d="M%s %sl-6 -9h12z"/></g>`,
				esc(m.Text), num(x), num(markTop), num(x), num(plotBottom), num(x), num(markTop+9))
		case MarkRollback:
			fmt.Fprintf(&b, `<g class="mark rollback"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s"/><rect x="%s" y="%s" width="9" height="9"/></g>`,
				esc(m.Text), num(x), num(markTop), num(x), num(plotBottom), num(x-4.5), num(plotBottom-9))
		case MarkApplied:
			fmt.Fprintf(&b, `<g class="mark applied"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s"/></g>`,
				esc(m.Text), num(x), num(markTop), num(x), num(plotBottom))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built above with every text escaped
}

// stepPath draws steps as a step line; a NaN value (none set) is a gap.
func (ch *Chart) stepPath(b *strings.Builder, class string, steps []Step) {
	var d strings.Builder
	pen := false
	for i, s := range steps {
		start := s.At
		if start.Before(ch.From) {
			start = ch.From
		}
		end := ch.To
		if i+1 < len(steps) {
			end = steps[i+1].At
		}
		if math.IsNaN(s.Value) || end.Before(ch.From) {
			pen = false
			continue
		}
		y := ch.y(s.Value)
		if pen {
			fmt.Fprintf(&d, "V%s", num(y))
		} else {
			fmt.Fprintf(&d, "M%s %s", num(ch.x(start)), num(y))
		}
		fmt.Fprintf(&d, "H%s", num(ch.x(end)))
		pen = true
	}
	if d.Len() > 0 {
		fmt.Fprintf(b, `<path class="%s" d="%s"><title>%s</title></path>`, class, d.String(), class)
	}
}

// usagePath draws the usage line, with a gap where a point is missing.
func (ch *Chart) usagePath() string {
	var d strings.Builder
	var prev time.Time
	for _, s := range ch.Usage {
		if math.IsNaN(s.Value) {
			prev = time.Time{}
			continue
		}
		cmd := "L"
		if prev.IsZero() || s.At.Sub(prev) > ch.Step*3/2 {
			cmd = "M"
		}
		fmt.Fprintf(&d, "%s%s %s", cmd, num(ch.x(s.At.Add(ch.Step/2))), num(ch.y(s.Value)))
		prev = s.At
	}
	return d.String()
}

// timeTicks is the time axis' tick interval for a span (at most about
// six ticks) and the layout of their labels.
func timeTicks(span time.Duration) (time.Duration, string) {
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour} {
		if span/d <= 6 {
			return d, "15:04"
		}
	}
	for _, d := range []time.Duration{24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour} {
		if span/d <= 6 {
			return d, "Jan 2"
		}
	}
	return 56 * 24 * time.Hour, "Jan 2"
}

// Row is one line of a panel's table: the figures the chart draws, for
// screen readers and browsers without SVG.
type Row struct {
	At                    time.Time
	Request, Limit, Usage string
	Note                  string
}

// maxUsageRows bounds the usage points a panel's table lists; between them
// the table gives every step change and mark.
const maxUsageRows = 24

// Rows are the panel's figures: every step change and mark, and the usage
// at most maxUsageRows times (the highest reading of each group of points).
func (ch *Chart) Rows() []Row {
	type ev struct {
		at   time.Time
		note string
		use  float64
	}
	var evs []ev
	for _, s := range slices.Concat(ch.Request, ch.Limit) {
		at := s.At
		if at.Before(ch.From) {
			at = ch.From
		}
		evs = append(evs, ev{at: at, use: math.NaN()})
	}
	for _, m := range ch.Marks {
		evs = append(evs, ev{at: m.At, note: m.Text, use: math.NaN()})
	}
	for _, bd := range ch.Bands {
		evs = append(evs, ev{at: bd.From, note: fmt.Sprintf("throttled %d%%", bd.Percent), use: math.NaN()})
	}
	group := max((len(ch.Usage)+maxUsageRows-1)/maxUsageRows, 1)
	for i := 0; i < len(ch.Usage); i += group {
		best := Sample{Value: math.NaN()}
		for _, s := range ch.Usage[i:min(i+group, len(ch.Usage))] {
			if !math.IsNaN(s.Value) && (math.IsNaN(best.Value) || s.Value > best.Value) {
				best = s
			}
		}
		if !math.IsNaN(best.Value) {
			evs = append(evs, ev{at: best.At, use: best.Value})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	var rows []Row
	for _, e := range evs {
		if n := len(rows); n > 0 && rows[n-1].At.Equal(e.at) {
			r := &rows[n-1]
			r.Note = joinNote(r.Note, e.note)
			if !math.IsNaN(e.use) {
				r.Usage = ch.Format(e.use)
			}
			continue
		}
		r := Row{At: e.at, Request: ch.formatAt(ch.Request, e.at), Limit: ch.formatAt(ch.Limit, e.at), Note: e.note}
		if !math.IsNaN(e.use) {
			r.Usage = ch.Format(e.use)
		}
		rows = append(rows, r)
	}
	return rows
}

func joinNote(a, b string) string {
	return strings.Join(slices.DeleteFunc([]string{a, b}, func(s string) bool { return s == "" }), "; ")
}

// formatAt writes the step value in force at t; "not known" without
// steps.
func (ch *Chart) formatAt(steps []Step, t time.Time) string {
	if len(steps) == 0 {
		return "not known"
	}
	return ch.Format(valueAt(steps, t))
}

// valueAt is the step value in force at t.
func valueAt(steps []Step, t time.Time) float64 {
	i, _ := slices.BinarySearchFunc(steps, t, func(s Step, t time.Time) int {
		if s.At.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return math.NaN()
	}
	return steps[i-1].Value
}
