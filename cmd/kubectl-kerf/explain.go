package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// maxBasis bounds the kerf.dev/recommendation-basis annotation explain
// decodes (an object's annotations total at most 256 KiB).
const maxBasis = 256 << 10

func newExplainCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "explain WORKLOAD [-n NAMESPACE]",
		Short: "Why a workload was rolled back or held back, and what happens next",
		Long: "explain says why the workload's change was rolled back (the rolled_back\n" +
			"action's reason and figures, the HealthWatch condition, the breach), why\n" +
			"the recommender held values back (refused actions and the\n" +
			"kerf.dev/recommendation-basis annotation's refusals, with their figures),\n" +
			"and what happens next (cooldowns, the backoff's state).\n" +
			"WORKLOAD is the recommendation's name or the workload's kind/name.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeWorkloads,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.explain(cmd.Context(), args[0])
		},
	}
}

func (o *options) explain(ctx context.Context, arg string) error {
	r, _, err := o.recommendation(ctx, arg)
	if err != nil {
		return err
	}
	return explainTo(o.streams.Out, o.now(), r)
}

// explainTo writes the explanation of r.
func explainTo(w io.Writer, now time.Time, r *v1alpha1.RightsizingRecommendation) error {
	st := &r.Status
	fmt.Fprintf(w, "%s (RightsizingRecommendation %s/%s): phase %s", workloadName(r), r.Namespace, r.Name, orNone(string(st.Phase)))
	if st.Reason != "" {
		fmt.Fprintf(w, ", reason %s", st.Reason)
	}
	fmt.Fprintln(w)
	if st.Message != "" {
		fmt.Fprintf(w, "  %s\n", st.Message)
	}
	if v := r.Annotations[v1alpha1.PausedAnnotation]; v == "true" {
		fmt.Fprintf(w, "  Paused: annotation %s=true holds its applies back (kubectl kerf resume --workload %s).\n", v1alpha1.PausedAnnotation, r.Name)
	}
	explained := false

	if a := lastOf(st.History, v1alpha1.ActionRolledBack); a != nil {
		explained = true
		fmt.Fprintf(w, "\nRolled back %s ago (%s): %s\n", since(now, a.Time), a.Time.UTC().Format(time.RFC3339), orNone(a.Reason))
		if a.Message != "" {
			fmt.Fprintf(w, "  %s\n", a.Message)
		}
		writeList(w, "figures", a.Figures)
		fmt.Fprintf(w, "  resources: %s\n", resourceList(a.Resources))
		for _, cc := range a.Containers {
			fmt.Fprintf(w, "  %s: requests %s; limits %s (old→new)\n", cc.Name, orNone(pairs(cc.Old.Requests, cc.New.Requests)), orNone(pairs(cc.Old.Limits, cc.New.Limits)))
		}
	}
	if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionHealthWatch); cond != nil {
		fmt.Fprintf(w, "\nHealthWatch: %s (%s)", cond.Reason, cond.Status)
		if cond.Message != "" {
			fmt.Fprintf(w, ": %s", cond.Message)
		}
		fmt.Fprintln(w)
	}
	if b := st.Breach; b != nil {
		explained = true
		restored := "not restored yet"
		if b.Restored {
			restored = "restored"
		}
		fmt.Fprintf(w, "\nBreach: %s at %s, resources %s, %s\n", b.Reason, b.At.UTC().Format(time.RFC3339), resourceList(b.Resources), restored)
		writeList(w, "figures", b.Figures)
	}

	if a := lastOf(st.History, v1alpha1.ActionRefused); a != nil {
		explained = true
		fmt.Fprintf(w, "\nHeld back by the recommender %s ago (%s)", since(now, a.Time), a.Time.UTC().Format(time.RFC3339))
		if a.Message != "" {
			fmt.Fprintf(w, ": %s", a.Message)
		}
		fmt.Fprintln(w)
		for _, rf := range a.Refusals {
			fmt.Fprintf(w, "  %s %s %s: %s, held %s instead of %s%s\n", rf.Container, rf.Resource, rf.Field, rf.Reason,
				amount(rf.Resource, rf.Held), amount(rf.Resource, rf.Asked), observed(rf.Reason, rf.Resource, rf.Observed, rf.Threshold))
		}
	}
	if raw := r.Annotations[v1alpha1.RecommendationBasisAnnotation]; raw != "" {
		b, err := decodeBasis(raw)
		if err != nil {
			return err
		}
		var lines []string
		for _, cb := range b.Containers {
			for _, rf := range cb.Refusals {
				line := fmt.Sprintf("  %s %s %s: %s, held %s instead of %s%s", cb.Name, rf.Resource, rf.Field, rf.Reason,
					amount(rf.Resource, rf.Held), amount(rf.Resource, rf.Asked), observed(rf.Reason, rf.Resource, decimal(rf.Observed), decimal(rf.Threshold)))
				if rf.Message != "" {
					line += "\n    " + rf.Message
				}
				lines = append(lines, line)
			}
		}
		if len(lines) > 0 {
			explained = true
			fmt.Fprintf(w, "\nRecommender's refusals (%s, made %s ago by %s):\n%s\n", v1alpha1.RecommendationBasisAnnotation,
				since(now, metaTime(b.MadeAt)), orNone(b.Policy), strings.Join(lines, "\n"))
		}
	}
	if st.Phase == v1alpha1.PhaseBlocked {
		explained = true
	}
	if !explained {
		fmt.Fprintf(w, "\nNothing was rolled back or held back.\n")
	}

	var next []string
	for _, cd := range st.Cooldowns {
		next = append(next, fmt.Sprintf("%s decreases are blocked until %s (%s)", cd.Resource, cd.Until.UTC().Format(time.RFC3339), until(now, cd.Until.Time)))
	}
	if rb := st.Rollback; rb != nil {
		next = append(next, backoffNext(now, rb))
	}
	if len(next) > 0 {
		fmt.Fprintf(w, "\nNext:\n")
		for _, s := range next {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

// backoffNext says what the backoff state machine does next.
func backoffNext(now time.Time, rb *v1alpha1.RollbackState) string {
	s := fmt.Sprintf("backoff: %s, turn %d", rb.State, rb.Turn)
	if rb.Reason != "" {
		s += ", last turn failed with " + rb.Reason
	}
	switch rb.State {
	case v1alpha1.BackoffBackingOff:
		if rb.Expiry != nil {
			s += fmt.Sprintf("; the same values may be tried again after %s (%s) if turns remain", rb.Expiry.UTC().Format(time.RFC3339), until(now, rb.Expiry.Time))
		}
	case v1alpha1.BackoffBackedOff:
		s += "; the same values may be tried again if turns remain"
	case v1alpha1.BackoffFailedPermanent:
		s += "; these values are not applied again under this policy (a change of the policy or of the values reopens them)"
	case v1alpha1.BackoffRollingBack:
		s += "; the rollback is restoring the values"
	case v1alpha1.BackoffMonitoring:
		s += "; the health watch runs"
	}
	if rb.Message != "" {
		s += "\n    " + rb.Message
	}
	return s
}

// decodeBasis reads the kerf.dev/recommendation-basis annotation, at most
// maxBasis bytes.
func decodeBasis(raw string) (*v1alpha1.RecommendationBasis, error) {
	if len(raw) > maxBasis {
		return nil, fmt.Errorf("annotation %s: %d bytes, more than %d", v1alpha1.RecommendationBasisAnnotation, len(raw), maxBasis)
	}
	b, err := v1alpha1.ParseRecommendationBasis(raw)
	if err != nil {
		return nil, fmt.Errorf("decode %w", err)
	}
	return b, nil
}

// lastOf is the newest action of type t, or nil.
func lastOf(history []v1alpha1.Action, t v1alpha1.ActionType) *v1alpha1.Action {
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Type == t {
			return &history[i]
		}
	}
	return nil
}

func writeList(w io.Writer, name string, items []string) {
	if len(items) > 0 {
		fmt.Fprintf(w, "  %s: %s\n", name, strings.Join(items, "; "))
	}
}

// observed writes a refusal's observed figure and threshold, decimal
// strings, in human units: the throttling ratio and the MinChange fraction
// as they are, the other figures as amounts of res (an OOM peak and floor,
// a current value). A threshold of 0 outside OOMKill means none.
func observed(reason string, res v1alpha1.ResourceName, obs, threshold string) string {
	obs = figure(res, obs, reason == refusalThrottled)
	if threshold == "0" && reason != refusalOOMKill {
		threshold = ""
	}
	threshold = figure(res, threshold, reason == refusalThrottled || reason == refusalMinChange)
	switch {
	case obs != "" && threshold != "":
		return fmt.Sprintf(" (observed %s, threshold %s)", obs, threshold)
	case obs != "":
		return fmt.Sprintf(" (observed %s)", obs)
	}
	return ""
}

// The refusal reasons whose figures are no amounts (cluster/recommend's
// Reason; docs/recommender.md), and OOMKill, whose threshold of 0 is a
// floor of 0 bytes.
const (
	refusalThrottled = "Throttled"
	refusalMinChange = "MinChange"
	refusalOOMKill   = "OOMKill"
)

// figure writes a decimal string as an amount of res, or as it is when it
// is a ratio or no number.
func figure(res v1alpha1.ResourceName, s string, ratio bool) string {
	if s == "" || ratio {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > math.MaxInt64/2 {
		return s
	}
	return amount(res, int64(math.Round(f)))
}

// decimal writes a figure as the API's decimal strings are, without an
// exponent: 67108864, 0.25.
func decimal(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func metaTime(t time.Time) metav1.Time { return metav1.Time{Time: t} }
