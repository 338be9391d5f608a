package web

import (
	"fmt"
	"strings"
	"time"
)

// Window is the time axis the workload page's charts span: fit (the
// default) spans what happened, 1h, 1d and 1w end now. It is the page's
// query parameter window.
type Window string

// The windows the page offers.
const (
	// WindowFit spans the recommendation's actions and usage, with a
	// margin.
	WindowFit Window = "fit"
	// WindowHour, WindowDay and WindowWeek are the last hour, day and
	// week.
	WindowHour Window = "1h"
	WindowDay  Window = "1d"
	WindowWeek Window = "1w"
)

// Windows are the windows in the order the page links them.
var Windows = []Window{WindowFit, WindowHour, WindowDay, WindowWeek}

// ParseWindow reads the query parameter window; empty is WindowFit.
func ParseWindow(s string) (Window, error) {
	if s == "" {
		return WindowFit, nil
	}
	for _, w := range Windows {
		if string(w) == s {
			return w, nil
		}
	}
	names := make([]string, len(Windows))
	for i, w := range Windows {
		names[i] = string(w)
	}
	return "", fmt.Errorf("window %q: must be one of %s", s, strings.Join(names, ", "))
}

// Text is the window as its link reads.
func (w Window) Text() string {
	switch w {
	case WindowHour:
		return "last hour"
	case WindowDay:
		return "last day"
	case WindowWeek:
		return "last week"
	}
	return "what happened"
}

// span is a fixed window's length; zero for WindowFit.
func (w Window) span() time.Duration {
	switch w {
	case WindowHour:
		return time.Hour
	case WindowDay:
		return 24 * time.Hour
	case WindowWeek:
		return 7 * 24 * time.Hour
	}
	return 0
}

// The fit window's bounds: it spans at least fitMinSpan, and the last
// hour when nothing happened; its margins are fitMargin of its span.
const (
	fitMinSpan = 2 * time.Minute
	fitEmpty   = time.Hour
	fitMargin  = 0.05
)

// chartSpan is the charts' time axis. A fixed window ends at the view's
// Now. WindowFit spans from the first action or usage point to the last
// one (the end of its step), widened about its middle to fitMinSpan, with
// a margin of fitMargin each side; with neither, the last hour.
func chartSpan(v WorkloadView, w Window) (from, to time.Time) {
	now := v.Now.UTC()
	if d := w.span(); d > 0 {
		return now.Add(-d), now
	}
	var first, last time.Time
	see := func(from, to time.Time) {
		if first.IsZero() || from.Before(first) {
			first = from
		}
		if last.IsZero() || to.After(last) {
			last = to
		}
	}
	for _, e := range v.History {
		see(e.Time.Time, e.Time.Time)
	}
	for _, u := range v.Usage {
		if n := len(u.Points); n > 0 {
			see(u.Points[0].At, u.Points[n-1].At.Add(pointStep(u, u.Points[n-1])))
		}
	}
	if first.IsZero() {
		return now.Add(-fitEmpty), now
	}
	first, last = first.UTC(), last.UTC()
	if d := last.Sub(first); d < fitMinSpan {
		first = first.Add(-(fitMinSpan - d) / 2)
		last = first.Add(fitMinSpan)
	}
	margin := time.Duration(float64(last.Sub(first)) * fitMargin)
	return first.Add(-margin), last.Add(margin)
}

// timeTicks is the time axis' tick interval for a span (at most about
// six ticks) and the layout of their labels.
func timeTicks(span time.Duration) (time.Duration, string) {
	for _, d := range []time.Duration{15 * time.Second, 30 * time.Second} {
		if span/d <= 6 {
			return d, "15:04:05"
		}
	}
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
