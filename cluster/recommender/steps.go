package recommender

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stepTimer times one pass's steps. A step may come more than once in a
// pass (once per namespace); its time is the sum, observed once when the
// pass ends with the pass's total.
type stepTimer struct {
	seconds     *prometheus.HistogramVec
	start, last time.Time
	spent       map[string]time.Duration
	order       []string
}

// startSteps starts timing a pass's steps into seconds.
func startSteps(seconds *prometheus.HistogramVec) *stepTimer {
	now := time.Now()
	return &stepTimer{seconds: seconds, start: now, last: now, spent: map[string]time.Duration{}}
}

// step adds the time since the previous step ended to name's.
func (s *stepTimer) step(name string) {
	now := time.Now()
	if _, ok := s.spent[name]; !ok {
		s.order = append(s.order, name)
	}
	s.spent[name] += now.Sub(s.last)
	s.last = now
}

// total observes each step's time in the pass, and the whole pass's.
func (s *stepTimer) total() {
	for _, name := range s.order {
		s.seconds.WithLabelValues(name).Observe(s.spent[name].Seconds())
	}
	s.seconds.WithLabelValues("total").Observe(time.Since(s.start).Seconds())
}
