package web

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// The workload page's chart, a file per concern: what a panel holds and
// how it is built from the view (here), its time axis (chart_window.go),
// its value axis and words (chart_axes.go), its drawing (chart_svg.go,
// where marks close together merge) and its table (chart_rows.go).

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

// Sample is a usage reading over the Step from At.
type Sample struct {
	At    time.Time
	Step  time.Duration
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

// buildCharts makes each container's CPU and memory panels from the view,
// over the time axis window picks:
// the steps from the history's old → new values (the manifest's values
// where the history never touched one), the usage and its OOM kills and
// throttling from the Source's series, the rollbacks from the history.
func buildCharts(v WorkloadView, window Window) []containerCharts {
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
	from, to := chartSpan(v, window)
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
	for _, p := range u.Points {
		if p.At.Before(ch.From) || p.At.After(ch.To) {
			continue
		}
		val := p.MemoryBytes
		if ch.Resource == v1alpha1.ResourceCPU {
			val = p.CPUMilli
		}
		step := pointStep(u, p)
		s := Sample{At: p.At, Step: step, Value: math.NaN()}
		if val >= 0 {
			s.Value = float64(val)
		}
		ch.Usage = append(ch.Usage, s)
		switch {
		case ch.Resource == v1alpha1.ResourceMemory && p.OOMKills > 0:
			text := fmt.Sprintf("%d OOM kill%s in the %s from %s UTC", p.OOMKills, plural(p.OOMKills), spanName(step), p.At.UTC().Format("15:04"))
			ch.Marks = append(ch.Marks, Mark{At: p.At.Add(step / 2), Kind: MarkOOM, Text: text})
		case ch.Resource == v1alpha1.ResourceCPU && p.ThrottledPercent > 0:
			ch.Bands = append(ch.Bands, Band{From: p.At, To: p.At.Add(step), Percent: p.ThrottledPercent})
		}
	}
}

// pointStep is the span p covers: its own Step, else its series', else a
// minute.
func pointStep(u ContainerUsage, p UsagePoint) time.Duration {
	switch {
	case p.Step > 0:
		return p.Step
	case u.Step > 0:
		return u.Step
	}
	return time.Minute
}

// spanName names a point's span in a mark's text: "minute", "5 minutes".
func spanName(d time.Duration) string {
	if d == time.Minute {
		return "minute"
	}
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// action marks an applied or rolled_back action that touched the chart's
// resource, when it happened within the axis.
func (ch *Chart) action(e auditv1.Entry) {
	if len(e.Resources) > 0 && !slices.Contains(e.Resources, ch.Resource) {
		return
	}
	if e.Time.Time.Before(ch.From) || e.Time.Time.After(ch.To) {
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
