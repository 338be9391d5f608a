package quality

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"time"
)

// PlotTrace is the trace make bench-quality plots.
const PlotTrace = "weekly"

// plotBucket is the time one point of the plot covers: the usage is its
// highest, the values their last.
const plotBucket = 2 * time.Hour

// The plot's colours per strategy, in Strategies' order.
var plotColours = []string{"#d62728", "#1f77b4", "#2ca02c", "#7f7f7f", "#ff7f0e"}

// Plot draws the trace's CPU and memory demand against each strategy's
// requests (solid) and limits (dashed), from results that kept their
// values (Run's keep), as an SVG of two panels.
func Plot(t *Trace, results []*Result) ([]byte, error) {
	for _, r := range results {
		if len(r.Values) != len(t.Samples) {
			return nil, fmt.Errorf("plot %s: %s kept %d values for %d samples", t.Name, r.Strategy, len(r.Values), len(t.Samples))
		}
	}
	per := max(int(plotBucket/t.Step), 1)
	n := (len(t.Samples) + per - 1) / per
	const width, panel, left, top, gap = 960.0, 220.0, 60.0, 40.0, 50.0
	plotW := width - left - 20
	height := top + 2*panel + gap + 70
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14">%s: %s</text>`+"\n", left, html.EscapeString(t.Name), html.EscapeString(t.About))

	type series struct {
		get  func(v Values) float64
		use  func(s Sample) float64
		unit string
	}
	panels := []series{
		{func(v Values) float64 { return float64(v.CPURequest) / 1000 }, func(s Sample) float64 { return s.CPU }, "CPU (cores)"},
		{func(v Values) float64 { return float64(v.MemoryRequest) / gib }, func(s Sample) float64 { return s.Memory / gib }, "memory (GiB)"},
	}
	limits := []func(v Values) float64{
		func(v Values) float64 { return float64(v.CPULimit) / 1000 },
		func(v Values) float64 { return float64(v.MemoryLimit) / gib },
	}
	for pi, p := range panels {
		y0 := top + float64(pi)*(panel+gap)
		usage := make([]float64, n)
		for i, s := range t.Samples {
			usage[i/per] = math.Max(usage[i/per], p.use(s))
		}
		top := 0.0
		for _, u := range usage {
			top = math.Max(top, u)
		}
		for _, r := range results {
			for _, v := range r.Values {
				top = math.Max(top, math.Max(p.get(v), limits[pi](v)))
			}
		}
		top = niceCeil(top)
		x := func(i int) float64 { return left + plotW*float64(i)/float64(max(n-1, 1)) }
		y := func(v float64) float64 { return y0 + panel - panel*math.Min(v, top)/top }
		// Axes, grid and labels.
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#ccc"/>`+"\n", left, y0, plotW, panel)
		for k := 0; k <= 4; k++ {
			v := top * float64(k) / 4
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%.3g</text>`+"\n",
				left, left+plotW, y(v), y(v), left-5, y(v)+4, v)
		}
		days := int(t.Duration() / day)
		for d := 0; d <= days; d += 7 {
			xd := left + plotW*float64(d)*float64(day)/float64(t.Duration())
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#ddd"/><text x="%.1f" y="%.0f" text-anchor="middle">day %d</text>`+"\n",
				xd, xd, y0, y0+panel, xd, y0+panel+15, d)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", left+5, y0+14, p.unit)
		line := func(vals []float64, colour, dash string, w float64) {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="`, colour, w, dash)
			for i, v := range vals {
				fmt.Fprintf(&b, "%.1f,%.1f ", x(i), y(v))
			}
			b.WriteString(`"/>` + "\n")
		}
		line(usage, "black", "", 1)
		for ri, r := range results {
			req, lim := make([]float64, n), make([]float64, n)
			for i, v := range r.Values {
				req[i/per], lim[i/per] = p.get(v), limits[pi](v)
			}
			colour := plotColours[ri%len(plotColours)]
			line(req, colour, "", 1.5)
			line(lim, colour, ` stroke-dasharray="5,3"`, 1)
		}
	}
	// The legend.
	ly := top + 2*panel + gap + 35
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="black"/><text x="%.0f" y="%.0f">demand (highest 1-minute mean in 2 h)</text>`+"\n", left, left+20, ly, ly, left+25, ly+4)
	for ri, r := range results {
		lx := left + 260 + float64(ri)*120
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="1.5"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			lx, lx+20, ly, ly, plotColours[ri%len(plotColours)], lx+25, ly+4, html.EscapeString(r.Strategy))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#555">solid: request; dashed: limit (none: no line above 0)</text>`+"\n", left, ly+22)
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

// niceCeil rounds v up to 1, 2, 4 or 8 times a power of ten, so quarters
// of it read well.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
