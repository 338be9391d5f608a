package rightsizing

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// maxEventNote is the apiserver's limit on an Event's note. The status'
// limits are api/v1alpha1's (MaxHistory, MaxReasonLength and the rest),
// beside the CRD markers they mirror.
const maxEventNote = 1024

// statusLimits are the limits fitStatus cuts the action messages to; a
// test loosens them to make the apiserver refuse a write.
var statusLimits = struct{ actionMessage int }{actionMessage: v1alpha1.MaxActionMessageLength}

// The outcome label of kerf_status_writes_invalid_total.
const (
	invalidFallback = "fallback"
	invalidRefused  = "refused"
)

// cutTo cuts s to at most n bytes, on a rune boundary, and ends it with
// mark(k), k being the bytes left out. It is the leader's one string
// cutter; fit and the refusals' ellipsis are its two marks.
func cutTo(s string, n int, mark func(left int) string) string {
	if len(s) <= n {
		return s
	}
	// k is at most len(s), so its mark is at most this long.
	at := max(n-len(mark(len(s))), 0)
	for at > 0 && !utf8.RuneStart(s[at]) {
		at--
	}
	return s[:at] + mark(len(s)-at)
}

// fit cuts s to at most n bytes and says how many bytes were left out:
// "… (and 1234 more bytes)".
func fit(s string, n int) string { return cutTo(s, n, moreBytes) }

func moreBytes(n int) string { return fmt.Sprintf("… (and %d more bytes)", n) }

// ellipsis marks a cut with "…" alone, as the refusals' message, figures
// and Event note do.
func ellipsis(int) string { return "…" }

// joinFit joins items with sep into at most n bytes. It keeps as many
// whole items as fit, then "… (and N more <noun>)" for those left out.
// When not even the first item fits, it is cut by fit.
func joinFit(items []string, sep string, n int, noun string) string {
	all := strings.Join(items, sep)
	if len(all) <= n {
		return all
	}
	more := func(k int) string { return fmt.Sprintf("%s… (and %d more %s)", sep, k, noun) }
	size, kept := 0, 0
	for i, it := range items {
		add := len(it)
		if i > 0 {
			add += len(sep)
		}
		if size+add+len(more(len(items)-i-1)) > n {
			break
		}
		size += add
		kept++
	}
	if kept == 0 {
		return fit(all, n)
	}
	return strings.Join(items[:kept], sep) + more(len(items)-kept)
}

// fitFigures keeps at most v1alpha1.MaxFigures figures of at most
// v1alpha1.MaxFigureLength bytes each; the last kept one says how many
// were left out.
func fitFigures(f []string) []string {
	if len(f) > v1alpha1.MaxFigures {
		f = append(slices.Clone(f[:v1alpha1.MaxFigures-1]), fmt.Sprintf("… and %d more figures", len(f)-v1alpha1.MaxFigures+1))
	}
	for i := range f {
		f[i] = fit(f[i], v1alpha1.MaxFigureLength)
	}
	return f
}

// capTouched keeps at most v1alpha1.MaxTouched touched objects, in their
// order, and returns how many pods it left out. It keeps every object
// that is not a pod (the workload, the HPA), then the first pods.
func capTouched(touched []v1alpha1.TouchedObject) ([]v1alpha1.TouchedObject, int32) {
	if len(touched) <= v1alpha1.MaxTouched {
		return touched, 0
	}
	others := 0
	for _, o := range touched {
		if o.Kind != "Pod" {
			others++
		}
	}
	room := max(v1alpha1.MaxTouched-others, 0)
	out := make([]v1alpha1.TouchedObject, 0, v1alpha1.MaxTouched)
	for _, o := range touched {
		if o.Kind == "Pod" {
			if room == 0 || len(out) == v1alpha1.MaxTouched {
				continue
			}
			room--
		} else if len(out) == v1alpha1.MaxTouched {
			continue
		}
		out = append(out, o)
	}
	return out, int32(len(touched) - len(out))
}

// fitStatus cuts st to the CRD's limits and returns what it cut, for the
// log. Otherwise the apiserver would refuse the status write (422), and
// it would be retried forever while the change runs unwatched.
//
// It cuts every field the leader fills from what it cannot bound: pods'
// failures joined into messages, the touched pods, per-pod baselines,
// figures.
//   - Messages are cut on a rune boundary and say how much was left out.
//   - Lists keep their newest entries (history, turns) or their first.
//   - The touched pods count those left out in change.touchedOmitted.
func fitStatus(st *v1alpha1.RightsizingRecommendationStatus) []string {
	var cut []string
	str := func(name string, s *string, n int) {
		if len(*s) > n {
			cut = append(cut, fmt.Sprintf("%s (%d bytes, limit %d)", name, len(*s), n))
			*s = fit(*s, n)
		}
	}
	list := func(name string, n, limit int) bool {
		if n > limit {
			cut = append(cut, fmt.Sprintf("%s (%d items, limit %d)", name, n, limit))
			return true
		}
		return false
	}
	str("reason", &st.Reason, v1alpha1.MaxReasonLength)
	str("message", &st.Message, v1alpha1.MaxStatusMessageLength)
	for i := range st.Conditions {
		str("conditions["+st.Conditions[i].Type+"].message", &st.Conditions[i].Message, v1alpha1.MaxConditionMessageLength)
	}
	for i := range st.History {
		a := &st.History[i]
		str(fmt.Sprintf("history[%d].reason", i), &a.Reason, v1alpha1.MaxReasonLength)
		str(fmt.Sprintf("history[%d].message", i), &a.Message, statusLimits.actionMessage)
		if list(fmt.Sprintf("history[%d].figures", i), len(a.Figures), v1alpha1.MaxFigures) || slices.ContainsFunc(a.Figures, func(f string) bool { return len(f) > v1alpha1.MaxFigureLength }) {
			a.Figures = fitFigures(a.Figures)
		}
		if list(fmt.Sprintf("history[%d].containers", i), len(a.Containers), v1alpha1.MaxActionContainers) {
			a.Containers = a.Containers[:v1alpha1.MaxActionContainers]
		}
		if list(fmt.Sprintf("history[%d].refusals", i), len(a.Refusals), v1alpha1.MaxActionRefusals) {
			a.Refusals = a.Refusals[:v1alpha1.MaxActionRefusals]
		}
	}
	if b := st.Breach; b != nil {
		if list("breach.figures", len(b.Figures), v1alpha1.MaxFigures) || slices.ContainsFunc(b.Figures, func(f string) bool { return len(f) > v1alpha1.MaxFigureLength }) {
			b.Figures = fitFigures(b.Figures)
		}
	}
	if r := st.Rollback; r != nil {
		str("rollback.reason", &r.Reason, v1alpha1.MaxReasonLength)
		str("rollback.message", &r.Message, v1alpha1.MaxRollbackMessageLength)
		if list("rollback.turns", len(r.Turns), v1alpha1.MaxTurns) {
			r.Turns = slices.Clone(r.Turns[len(r.Turns)-v1alpha1.MaxTurns:])
		}
		for i := range r.Turns {
			str(fmt.Sprintf("rollback.turns[%d].reason", i), &r.Turns[i].Reason, v1alpha1.MaxReasonLength)
			str(fmt.Sprintf("rollback.turns[%d].outcome", i), &r.Turns[i].Outcome, v1alpha1.MaxOutcomeLength)
		}
	}
	if ch := st.Change; ch != nil {
		if list("change.touched", len(ch.Touched), v1alpha1.MaxTouched) {
			var omitted int32
			ch.Touched, omitted = capTouched(ch.Touched)
			ch.TouchedOmitted += omitted
		}
		// A container without a restart or OOM baseline counts its
		// restarts and kills in full. One without a throttling baseline
		// starts its window anew. So cutting errs towards a rollback,
		// never towards a change left unwatched.
		// chooseCanary keeps the canary within its bound; a longer one
		// keeps its first pods, the only ones then resized and restored.
		if ch.Canary != nil && list("change.canary.pods", len(ch.Canary.Pods), v1alpha1.MaxCanaryPods) {
			ch.Canary.Pods = ch.Canary.Pods[:v1alpha1.MaxCanaryPods]
		}
		if list("change.restartBaselines", len(ch.RestartBaselines), v1alpha1.MaxBaselines) {
			ch.RestartBaselines = ch.RestartBaselines[:v1alpha1.MaxBaselines]
		}
		if list("change.oomBaselines", len(ch.OOMBaselines), v1alpha1.MaxBaselines) {
			ch.OOMBaselines = ch.OOMBaselines[:v1alpha1.MaxBaselines]
		}
		if list("change.throttlingBaselines", len(ch.ThrottlingBaselines), v1alpha1.MaxBaselines) {
			ch.ThrottlingBaselines = ch.ThrottlingBaselines[:v1alpha1.MaxBaselines]
		}
	}
	return cut
}

// minimalStatus replaces the free text an outcome wrote with a note that
// the apiserver refused it; what is left is the transition itself. The
// free text is status.message, its conditions' messages, its action's
// message and figures, and the rollback's message. The breach's figures
// are cut to their limits.
func minimalStatus(st *v1alpha1.RightsizingRecommendationStatus, o outcome, refused error) {
	note := fit("message left out: the apiserver refused the status write: "+refused.Error(), 512)
	if o.setReason {
		st.Message = note
	}
	for _, cond := range o.conditions {
		if c := meta.FindStatusCondition(st.Conditions, cond.Type); c != nil {
			c.Message = note
		}
	}
	if n := len(st.History); o.action != nil && n > 0 {
		st.History[n-1].Message, st.History[n-1].Figures = note, nil
	}
	if st.Rollback != nil && st.Rollback.Message != "" {
		st.Rollback.Message = note
	}
	if st.Breach != nil {
		st.Breach.Figures = fitFigures(st.Breach.Figures)
	}
	fitStatus(st)
}
