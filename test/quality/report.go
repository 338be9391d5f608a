package quality

import (
	"fmt"
	"io"
	"strings"
)

// Strategies returns a fresh instance of each strategy, Kerf first and
// Kerf with scaled limits last: what a Guaranteed pod, or a policy with
// keepLimitProportion, gets.
func Strategies() ([]Strategy, error) {
	k, err := NewKerf()
	if err != nil {
		return nil, err
	}
	scaled, err := NewKerfScaledLimits()
	if err != nil {
		return nil, err
	}
	return []Strategy{k, NewVPA(), NewPercentile(), &Manual{}, scaled}, nil
}

// Run replays every trace through every strategy. It returns the results
// per trace in the strategies' order, and their sums per strategy. keep
// names the trace whose values are kept for the plot.
func Run(traces []*Trace, keep string) (perTrace [][]*Result, sums []*Result, err error) {
	strategies, err := Strategies()
	if err != nil {
		return nil, nil, err
	}
	sums = make([]*Result, len(strategies))
	for i, s := range strategies {
		sums[i] = &Result{Strategy: s.Name(), Trace: "all"}
	}
	for _, t := range traces {
		row := make([]*Result, len(strategies))
		for i, s := range strategies {
			r, err := Replay(t, s, t.Name == keep)
			if err != nil {
				return nil, nil, err
			}
			row[i] = r
			sums[i].Add(r)
		}
		perTrace = append(perTrace, row)
	}
	return perTrace, sums, nil
}

// WriteTable writes the results as a Markdown table: one row per trace
// and strategy, then the sums.
func WriteTable(w io.Writer, perTrace [][]*Result, sums []*Result) error {
	var b strings.Builder
	b.WriteString("| trace | strategy | CPU slack core-h (× usage) | memory slack GiB-h (× usage) | OOM kills | throttled periods | changes | rollbacks |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	row := func(r *Result) {
		fmt.Fprintf(&b, "| %s | %s | %.1f (%.2f) | %.1f (%.2f) | %d | %.4f | %d | %d |\n", r.Trace, r.Strategy,
			r.CPUSlack, r.CPUSlackRatio(), r.MemorySlack, r.MemorySlackRatio(), r.OOMKills, r.ThrottledRatio(), r.Changes, r.Rollbacks)
	}
	for _, rs := range perTrace {
		for _, r := range rs {
			row(r)
		}
	}
	for _, r := range sums {
		row(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteGoals writes Kerf's sums against VPA's and issue 34's goals: OOM
// kills at most 1/10 of VPA's, throttled ratio at most 1/2, slack at
// most 1.10×.
func WriteGoals(w io.Writer, sums []*Result) error {
	var kerf, vpa *Result
	for _, r := range sums {
		switch r.Strategy {
		case "Kerf":
			kerf = r
		case "VPA":
			vpa = r
		}
	}
	if kerf == nil || vpa == nil {
		return fmt.Errorf("goals: Kerf and VPA must both be run")
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	lines := []struct {
		name           string
		kerf, vpa, max float64
	}{
		{"OOM kills", float64(kerf.OOMKills), float64(vpa.OOMKills), 0.1},
		{"throttled-period ratio", kerf.ThrottledRatio(), vpa.ThrottledRatio(), 0.5},
		{"CPU slack (core-h)", kerf.CPUSlack, vpa.CPUSlack, 1.10},
		{"memory slack (GiB-h)", kerf.MemorySlack, vpa.MemorySlack, 1.10},
	}
	var b strings.Builder
	b.WriteString("| goal | Kerf | VPA | Kerf / VPA | at most | |\n|---|---:|---:|---:|---:|---|\n")
	for _, l := range lines {
		rel := ratio(l.kerf, l.vpa)
		ok := l.kerf <= l.max*l.vpa
		rels := fmt.Sprintf("%.2f", rel)
		if l.vpa == 0 {
			rels = "–"
		}
		fmt.Fprintf(&b, "| %s | %.4g | %.4g | %s | %.2f | %s |\n", l.name, l.kerf, l.vpa, rels, l.max, verdict(ok))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
