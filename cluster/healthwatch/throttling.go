package healthwatch

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
}

// ratioSyntax is the CRD's syntax of throttlingRatio: a decimal in [0, 1].
var ratioSyntax = regexp.MustCompile(`^(0([.][0-9]+)?|1([.]0+)?)$`)

// evaluateThrottling evaluates the throttling ratio of each of names over
// [t0+2m, bound], for a watch that ends at end.
func evaluateThrottling(now, t0, end, bound time.Time, ratio string, src ThrottlingSource, adopted []*corev1.Pod, names []string) throttling {
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
	windows, err := src.ThrottleWindows(adopted, names, w, bound)
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
