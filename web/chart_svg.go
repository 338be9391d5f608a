package web

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
			esc(fmt.Sprintf("throttled %d%% of CFS periods in the %s from %s UTC", bd.Percent, spanName(bd.To.Sub(bd.From)), bd.From.UTC().Format("15:04"))))
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
	// Marks on top; marks of a kind closer than markMergeWidth are one.
	for _, g := range ch.markGroups() {
		ch.drawMark(&b, g)
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
	var prevStep time.Duration
	for _, s := range ch.Usage {
		if math.IsNaN(s.Value) {
			prev = time.Time{}
			continue
		}
		cmd := "L"
		if prev.IsZero() || s.At.Sub(prev) > prevStep*3/2 {
			cmd = "M"
		}
		fmt.Fprintf(&d, "%s%s %s", cmd, num(ch.x(s.At.Add(s.Step/2))), num(ch.y(s.Value)))
		prev, prevStep = s.At, s.Step
	}
	return d.String()
}

// markMergeWidth is the least distance, in SVG units, between two drawn
// marks of a kind (3.3 % of the plot's width). Marks closer than it are
// drawn as one, at the first one's place, with their count beside it;
// marks of different kinds sit at different heights. A dozen rollbacks in
// a minute of an hour's axis stay one readable mark, not a smear.
const markMergeWidth = 16.0

// maxMergedTitles bounds the texts a merged mark's tooltip lists; the
// table below the panel lists every mark.
const maxMergedTitles = 3

// markGroup is the marks of one kind drawn as one, at X.
type markGroup struct {
	Kind  MarkKind
	X     float64
	Marks []Mark
}

// markGroups merges each kind's marks, in time order: a mark joins the
// group before it when it is less than markMergeWidth from the group's
// place, so drawn groups of a kind are at least markMergeWidth apart.
func (ch *Chart) markGroups() []markGroup {
	marks := slices.Clone(ch.Marks)
	slices.SortStableFunc(marks, func(a, b Mark) int { return a.At.Compare(b.At) })
	var out []markGroup
	last := map[MarkKind]int{}
	for _, m := range marks {
		x := ch.x(m.At)
		if i, ok := last[m.Kind]; ok && x-out[i].X < markMergeWidth {
			out[i].Marks = append(out[i].Marks, m)
			continue
		}
		last[m.Kind] = len(out)
		out = append(out, markGroup{Kind: m.Kind, X: x, Marks: []Mark{m}})
	}
	return out
}

// title is a group's tooltip: its one mark's text, or how many and the
// first maxMergedTitles texts.
func (g markGroup) title() string {
	if len(g.Marks) == 1 {
		return g.Marks[0].Text
	}
	noun := map[MarkKind]string{MarkOOM: "OOM kill marks", MarkRollback: "rollbacks", MarkApplied: "applies"}[g.Kind]
	first, last := g.Marks[0].At.UTC(), g.Marks[len(g.Marks)-1].At.UTC()
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s from %s to %s UTC: ", len(g.Marks), noun, first.Format("15:04:05"), last.Format("15:04:05"))
	for i, m := range g.Marks[:min(len(g.Marks), maxMergedTitles)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(m.Text)
	}
	if n := len(g.Marks) - maxMergedTitles; n > 0 {
		fmt.Fprintf(&b, "; and %d more (the table lists each)", n)
	}
	return b.String()
}

// drawMark draws a group: OOM kills a red triangle at the top, rollbacks
// a black square at the bottom, applies a faint line; a count beside the
// symbol when the group holds more than one.
func (ch *Chart) drawMark(b *strings.Builder, g markGroup) {
	esc := template.HTMLEscapeString
	x, n := g.X, len(g.Marks)
	fmt.Fprintf(b, `<g class="mark %s" data-count="%d"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s"/>`,
		g.Kind, n, esc(g.title()), num(x), num(markTop), num(x), num(plotBottom))
	countY := padTop + plotH/2
	switch g.Kind {
	case MarkOOM:
		fmt.Fprintf(b, `<path d="M%s %sl-6 -9h12z"/>`, num(x), num(markTop+9))
		countY = markTop + 21
	case MarkRollback:
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="9" height="9"/>`, num(x-4.5), num(plotBottom-9))
		countY = plotBottom - 13
	}
	if n > 1 {
		fmt.Fprintf(b, `<text class="count" x="%s" y="%s" text-anchor="middle">%d</text>`, num(x), num(countY), n)
	}
	b.WriteString(`</g>`)
}
