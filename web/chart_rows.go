package web

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

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
