package healthwatch

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// throttling is the throttling signal's evaluation.
type throttling struct {
	applies, evaluated bool
	// breach is the worst crossing figure, empty without a breach.
	breach string
	// parts are the evaluated containers' figures, for the message.
	parts []string
	// notEvaluated says why the signal applies but is not evaluated.
	notEvaluated string
	// baselines are the baselines to record, nil when none is new.
	baselines []v1alpha1.ThrottlingBaseline
}

// ratioSyntax is the CRD's syntax of throttlingRatio: a decimal in [0, 1].
var ratioSyntax = regexp.MustCompile(`^(0([.][0-9]+)?|1([.]0+)?)$`)

// evaluateThrottling evaluates the throttling ratio of each of names over
// [t0+2m, bound], for a watch that ends at end. It starts each container's
// window at its recorded baseline when the source has no sample at or
// before t0+2m (windowsWithBaselines).
func evaluateThrottling(now, t0, end, bound time.Time, ratio string, src ThrottlingSource, adopted []*corev1.Pod, names []string, baselines []v1alpha1.ThrottlingBaseline) throttling {
	if len(names) == 0 {
		return throttling{}
	}
	if !ratioSyntax.MatchString(ratio) {
		return throttling{applies: true, notEvaluated: fmt.Sprintf("spec.guardrails.rollback.throttlingRatio %q is not a decimal string in (0, 1] such as \"0.25\"", ratio)}
	}
	thr, _ := new(big.Rat).SetString(ratio)
	if thr.Sign() == 0 {
		return throttling{} // 0 turns the signal off
	}
	res := throttling{applies: true}
	w := t0.Add(ThrottlingDelay)
	switch {
	case src == nil:
		res.notEvaluated = "no throttling source is configured (health.metricsURL unset and health.cadvisorFallback off)"
		return res
	case now.Before(w):
		res.notEvaluated = fmt.Sprintf("the throttling window opens at T0+%s (%s)", ThrottlingDelay, stamp(w))
		return res
	case !end.After(w):
		res.notEvaluated = fmt.Sprintf("the watch ends before the throttling window opens at T0+%s", ThrottlingDelay)
		return res
	}
	var windows map[string]ThrottleWindow
	var err error
	if cs, ok := src.(CounterSource); ok {
		windows, res.baselines, err = windowsWithBaselines(cs, adopted, names, w, bound, baselines)
	} else {
		windows, err = src.ThrottleWindows(adopted, names, w, bound)
	}
	if err != nil {
		res.notEvaluated = fmt.Sprintf("read the throttling window: %v", err)
		return res
	}
	decimals := 2
	if i := strings.IndexByte(ratio, '.'); i >= 0 {
		decimals = max(decimals, len(ratio)-i-1)
	}
	var worst *big.Rat
	var pending []string
	for _, name := range names {
		win := windows[name]
		r := windowRatio(win)
		if r == nil {
			pending = append(pending, fmt.Sprintf("container %s only %.0f of %d periods", name, max(win.Periods, 0), MinThrottlingPeriods))
			continue
		}
		sign := "<"
		if r.Cmp(thr) >= 0 {
			sign = "≥"
		}
		fig := fmt.Sprintf("throttlingRatio %s %s %s (container %s, %.0f periods)", truncated(r, decimals), sign, ratio, name, win.Periods)
		res.parts = append(res.parts, fig)
		if sign == "≥" && (worst == nil || r.Cmp(worst) > 0) {
			worst, res.breach = r, fig
		}
	}
	res.evaluated = len(pending) == 0
	if !res.evaluated {
		// The counts go with the figures; what is not evaluated stays the
		// same words until it is, so the leader rewrites it rarely.
		res.parts = append(res.parts, "throttling: "+strings.Join(pending, ", ")+" since T0+"+ThrottlingDelay.String())
		res.notEvaluated = fmt.Sprintf("fewer than %d periods since T0+%s in a container whose cpu changed", MinThrottlingPeriods, ThrottlingDelay)
	}
	return res
}

// windowRatio returns throttled / periods exactly, nil when the window
// holds fewer than MinThrottlingPeriods periods or is not a number.
func windowRatio(w ThrottleWindow) *big.Rat {
	if math.IsNaN(w.Periods) || math.IsInf(w.Periods, 0) || w.Periods < MinThrottlingPeriods ||
		math.IsNaN(w.Throttled) || math.IsInf(w.Throttled, 0) {
		return nil
	}
	t := new(big.Rat).SetFloat64(max(w.Throttled, 0))
	return t.Quo(t, new(big.Rat).SetFloat64(w.Periods))
}

// truncated shows r with the given decimals, truncated so that a ratio
// below the threshold never shows as equal to it.
func truncated(r *big.Rat, decimals int) string {
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)
	q := new(big.Int).Mul(r.Num(), scale)
	q.Quo(q, r.Denom())
	return new(big.Rat).SetFrac(q, scale).FloatString(decimals)
}

// windowsWithBaselines sums the window [from, to] of the agents' raw
// counters as Counters does, with the recorded baselines added. Each
// baseline is added as a sample of the instance that ran at its time.
//
// So a container whose window start this source never saw counts from the
// recorded baseline, not from its first sample here. The source misses
// the start when its leader took over after the window opened. A sample
// of the source at or before from, when it has one, is later than or the
// same as the baseline and wins, as the latest at or before from always
// does.
//
// It also returns the baselines to record: the recorded ones with those
// added that the samples give and they lack, nil when none is added.
func windowsWithBaselines(src CounterSource, pods []*corev1.Pod, names []string, from, to time.Time, recorded []v1alpha1.ThrottlingBaseline) (map[string]ThrottleWindow, []v1alpha1.ThrottlingBaseline, error) {
	uids := make([]types.UID, len(pods))
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
		byUID[p.UID] = p
	}
	samples, err := src.Samples(uids, from, to)
	if err != nil {
		return nil, nil, err
	}
	have := make(map[containerKey]bool, len(recorded))
	for _, b := range recorded {
		have[containerKey{types.UID(b.PodUID), b.Container}] = true
	}
	// The baseline each container of the window would get here: its
	// latest sample at or before from, else its first one after from of an
	// instance that started before from. An instance started in the
	// window counts from zero and needs none.
	found := map[containerKey]*CounterSample{}
	for i := range samples {
		x := &samples[i]
		k := containerKey{x.PodUID, x.Container}
		if have[k] || byUID[x.PodUID] == nil || !slices.Contains(names, x.Container) || x.At.After(to) {
			continue
		}
		bornInWindow := !x.Started.IsZero() && !x.Started.Before(from)
		cur := found[k]
		switch {
		case !x.At.After(from):
			if cur == nil || cur.At.After(from) || x.At.After(cur.At) {
				found[k] = x
			}
		case bornInWindow:
		case cur == nil || cur.At.After(from) && x.At.Before(cur.At):
			found[k] = x
		}
	}
	var added []v1alpha1.ThrottlingBaseline
	for k, x := range found {
		added = append(added, v1alpha1.ThrottlingBaseline{Pod: byUID[k.podUID].Name, PodUID: string(k.podUID), Container: k.container,
			Periods: int64(min(x.Periods, math.MaxInt64)), Throttled: int64(min(x.Throttled, math.MaxInt64)), At: metav1.NewTime(x.At)})
	}
	var out []v1alpha1.ThrottlingBaseline
	if room := v1alpha1.MaxBaselines - len(recorded); len(added) > 0 && room > 0 {
		slices.SortFunc(added, func(a, b v1alpha1.ThrottlingBaseline) int {
			return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodUID, b.PodUID), cmp.Compare(a.Container, b.Container))
		})
		out = append(slices.Clone(recorded), added[:min(len(added), room)]...)
	}

	// The recorded baselines join the samples as readings of the instance
	// that ran then: the newest one started at or before the baseline.
	withBase := samples
	for _, b := range recorded {
		uid := types.UID(b.PodUID)
		if byUID[uid] == nil || !slices.Contains(names, b.Container) || b.Periods < 0 || b.Throttled < 0 {
			continue
		}
		var started time.Time
		ok := false
		for i := range samples {
			x := &samples[i]
			if x.PodUID == uid && x.Container == b.Container && !x.Started.After(b.At.Time) && (!ok || x.Started.After(started)) {
				started, ok = x.Started, true
			}
		}
		if !ok {
			continue // no sample of that instance here: nothing to count from it
		}
		if len(withBase) == len(samples) {
			withBase = slices.Clone(samples)
		}
		withBase = append(withBase, CounterSample{PodUID: uid, Container: b.Container, Started: started,
			At: b.At.Time, Periods: uint64(b.Periods), Throttled: uint64(b.Throttled)})
	}
	return sumWindows(withBase, uids, names, from, to), out, nil
}
