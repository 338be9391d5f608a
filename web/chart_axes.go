package web

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

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
	var throttled time.Duration
	for _, bd := range ch.Bands {
		throttled += bd.To.Sub(bd.From)
	}
	if n := int(throttled / time.Minute); n > 0 {
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
