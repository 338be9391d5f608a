package web_test

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/web"
)

// burst is a view whose n actions (applied, then rolled back, in turn)
// all happened within span from t0, seen an hour after t0, without usage.
func burst(n int, span time.Duration) web.WorkloadView {
	v := rolledBack()
	v.Usage = nil
	v.Now = t0.Add(time.Hour)
	tmpl := v.History[0]
	v.History = nil
	for i := range n {
		e := tmpl
		e.Time = metav1.NewTime(t0.Add(span * time.Duration(i) / time.Duration(max(n-1, 1))))
		if i%2 == 1 {
			e.Type, e.Reason = v1alpha1.ActionRolledBack, "OOMKills"
			e.Containers = []v1alpha1.ContainerValueChange{{Name: "app", Old: tmpl.Containers[0].New, New: tmpl.Containers[0].Old}}
		}
		v.History = append(v.History, e)
	}
	return v
}

// memoryPanel loads the page at target and returns its memory panel.
func memoryPanel(t *testing.T, v web.WorkloadView, target string) (int, string, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}})
	status, body := get(t, mux, target)
	if status != http.StatusOK {
		return status, body, ""
	}
	charts := svgs(t, body)
	require.Len(t, charts, 2, body)
	return status, body, charts[1]
}

var markRE = regexp.MustCompile(`<g class="mark (\w+)" data-count="(\d+)"><title>[^<]*</title><line x1="([\d.]+)"`)

// marks are a panel's drawn marks of kind: their places and counts.
func marks(t *testing.T, svg, kind string) (xs []float64, total int) {
	t.Helper()
	for _, m := range markRE.FindAllStringSubmatch(svg, -1) {
		if m[1] != kind {
			continue
		}
		x, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err)
		n, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		xs, total = append(xs, x), total+n
	}
	return xs, total
}

func TestChartFitsActionsClusteredInTwoMinutes(t *testing.T) {
	_, _, mem := memoryPanel(t, burst(6, 2*time.Minute), "/ui/workloads/shop/web-rsr")
	// 12:00 to 12:02 and 6 s of margin each side, an hour before now.
	assert.Contains(t, mem, "Memory of container app from 2030-03-01 11:59 to 2030-03-01 12:02 UTC.")
	xs, n := marks(t, mem, "applied")
	require.Equal(t, 3, n)
	// The plot is 64 to 468: the first action sits near the left edge,
	// the last near the right one, not squeezed against the right.
	assert.InDelta(t, 64+404*0.05/1.1, xs[0], 2, "the first apply a margin from the left")
	rb, n := marks(t, mem, "rollback")
	require.Equal(t, 3, n)
	assert.InDelta(t, 468-404*0.05/1.1, rb[len(rb)-1], 2, "the last rollback a margin from the right")
	assert.Contains(t, mem, `>12:00:30</text>`, "ticks every 30 s")
}

func TestChartWindowControlSpansTheLastHourDayOrWeek(t *testing.T) {
	v := burst(6, 2*time.Minute)
	for _, c := range []struct{ window, label string }{
		{"1h", "from 2030-03-01 12:00 to 2030-03-01 13:00 UTC."},
		{"1d", "from 2030-02-28 13:00 to 2030-03-01 13:00 UTC."},
		{"1w", "from 2030-02-22 13:00 to 2030-03-01 13:00 UTC."},
		{"fit", "from 2030-03-01 11:59 to 2030-03-01 12:02 UTC."},
	} {
		t.Run(c.window, func(t *testing.T) {
			status, body, mem := memoryPanel(t, v, "/ui/workloads/shop/web-rsr?window="+c.window)
			require.Equal(t, http.StatusOK, status, body)
			assert.Contains(t, mem, c.label)
			assert.Regexp(t, `<a href="\?window=`+c.window+`" aria-current="page">`, body, "the window in force is marked")
			for _, w := range web.Windows {
				assert.Contains(t, body, `<a href="?window=`+string(w)+`"`)
			}
		})
	}
	// An action out of the window is not drawn at its edge.
	old := v
	old.History = slices.Clone(v.History)
	old.History[0].Time = metav1.NewTime(t0.Add(-2 * time.Hour))
	_, _, mem := memoryPanel(t, old, "/ui/workloads/shop/web-rsr?window=1h")
	_, n := marks(t, mem, "applied")
	assert.Equal(t, 2, n, "the apply two hours back is outside the last hour")

	status, body, _ := memoryPanel(t, v, "/ui/workloads/shop/web-rsr?window=2h")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `The parameter window is not valid: window &#34;2h&#34;: must be one of fit, 1h, 1d, 1w.`)
}

func TestChartMergesMarksCloserThan16Units(t *testing.T) {
	// 60 actions in one minute: 30 applies and 30 rollbacks.
	v := burst(60, time.Minute)
	for _, window := range []string{"1h", "fit"} {
		t.Run(window, func(t *testing.T) {
			_, _, mem := memoryPanel(t, v, "/ui/workloads/shop/web-rsr?window="+window)
			for _, kind := range []string{"applied", "rollback"} {
				xs, n := marks(t, mem, kind)
				assert.Equal(t, 30, n, "every %s counted once", kind)
				for i := 1; i < len(xs); i++ {
					assert.GreaterOrEqual(t, xs[i]-xs[i-1], 16.0, "%s marks %d and %d overlap: %v", kind, i-1, i, xs)
				}
				if window == "1h" {
					assert.Len(t, xs, 1, "a minute of an hour is 6.7 units: one mark")
				} else {
					assert.GreaterOrEqual(t, len(xs), 8, "the fit window spreads the minute over half the plot")
				}
			}
			if window == "1h" {
				assert.Contains(t, mem, `<text class="count" x="`)
				assert.Contains(t, mem, `>30</text>`)
				assert.Contains(t, mem, "30 rollbacks from 12:00:01 to 12:01:00 UTC: ")
				assert.Contains(t, mem, "; and 27 more (the table lists each)")
			}
		})
	}
}

// TestChartWindowFromUsage spans the usage when it reaches further than the
// actions.
func TestChartWindowFromUsage(t *testing.T) {
	v := rolledBack()
	_, _, mem := memoryPanel(t, v, "/ui/workloads/shop/web-rsr")
	// Usage from 11:30 to 12:15 (its last minute's end), 2 m 15 s margins.
	assert.Contains(t, mem, "from 2030-03-01 11:27 to 2030-03-01 12:17 UTC.")
	v.Usage, v.History = nil, []auditv1.Entry{}
	_, _, mem = memoryPanel(t, v, "/ui/workloads/shop/web-rsr")
	assert.Contains(t, mem, "from 2030-03-01 11:15 to 2030-03-01 12:15 UTC.", "nothing happened: the last hour")
}

// TestChartDrawsEachPointOverItsOwnStep: the leader's points are five
// minutes before the newest hour and minutes in it. A five-minute point
// is drawn over its five minutes (its throttled band, its OOM kills' mark
// and text), and the line runs on into the minutes after it without a
// gap; a point missing still breaks it.
func TestChartDrawsEachPointOverItsOwnStep(t *testing.T) {
	v := rolledBack()
	at := t0.Add(-time.Hour) // 11:00
	v.Usage = []web.ContainerUsage{{Container: "app", Step: time.Minute, Points: []web.UsagePoint{
		{At: at, Step: 5 * time.Minute, CPUMilli: 100, MemoryBytes: 100 << 20, ThrottledPercent: 30, OOMKills: 2},
		{At: at.Add(5 * time.Minute), CPUMilli: 120, MemoryBytes: 110 << 20, ThrottledPercent: 30},
		{At: at.Add(6 * time.Minute), CPUMilli: 130, MemoryBytes: 120 << 20},
		{At: at.Add(9 * time.Minute), CPUMilli: 140, MemoryBytes: 130 << 20}, // 11:07 and 11:08 missing
	}}}
	v.History = nil
	mux := http.NewServeMux()
	mux.Handle("GET /ui/workloads/{namespace}/{name}", &web.WorkloadPage{Source: &workloads{view: v}})
	_, body := get(t, mux, "/ui/workloads/shop/web-rsr")
	charts := svgs(t, body)
	require.Len(t, charts, 2, body)
	cpu, mem := charts[0], charts[1]

	assert.Contains(t, mem, "2 OOM kills in the 5 minutes from 11:00 UTC")
	assert.Contains(t, cpu, "throttled 30% of CFS periods in the 5 minutes from 11:00 UTC")
	assert.Contains(t, cpu, "throttled 30% of CFS periods in the minute from 11:05 UTC")
	widths := regexp.MustCompile(`<rect class="throttled" x="[\d.]+" y="[\d.]+" width="([\d.]+)"`).FindAllStringSubmatch(cpu, -1)
	require.Len(t, widths, 2)
	five, one := parseFloat(t, widths[0][1]), parseFloat(t, widths[1][1])
	assert.InDelta(t, 5*one, five, 0.05*five, "the five-minute band is five minutes wide")
	assert.Contains(t, cpu, "Throttled in 6 minutes.", "the aria-label counts the minutes, not the bands")

	d := regexp.MustCompile(`<path class="usage" d="([^"]*)"`).FindStringSubmatch(mem)
	require.NotNil(t, d)
	assert.Equal(t, 2, strings.Count(d[1], "M"), "one line from 11:00 to 11:06, another from 11:09: %s", d[1])
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return f
}
