package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// Block says why an apply may not go ahead now (phase Blocked,
// docs/design.md section 2).
type Block struct {
	// Reason is one of v1alpha1.ReasonPaused, ReasonFreezeWindow,
	// ReasonCooldown, ReasonSameValues, ReasonFailedPermanent.
	Reason string
	// Message says the same for people, naming the figure that blocks.
	Message string
	// Until is when the block lifts, when that is known, so the caller can
	// requeue for then; nil when only a change of policy or values lifts it.
	Until *time.Time
}

// CheckApply decides whether desired may replace running on a workload
// governed by spec, at now, given what the recommendation's status
// remembers of earlier rollbacks. It returns nil when the apply may go
// ahead, else the first block in this order (docs/design.md sections 2
// and 4):
//
//   - Paused: spec.guardrails.paused.
//   - FreezeWindow: a freeze window is open (see FreezeActive).
//   - Cooldown: desired lowers a request or a limit of a resource whose
//     cooldown (status.cooldowns) has not passed; raising it, or a value
//     absent on either side, is no decrease. At the cooldown's until
//     decreases pass again. The retry of rolled-back values the backoff
//     allows (backedOff, turns left) is governed by the backoff alone: the
//     cooldown does not hold it back, and applies to other values.
//   - FailedPermanent: the backoff gave up on exactly these values under
//     this policy state. A policy whose fingerprint differs from the one
//     recorded with the verdict (status.rollback.policy) reopens them for
//     a fresh run (Reopened); the same policy never retries them.
//   - SameValues: these values were rolled back before
//     (status.rolledBackFingerprints). They pass when the backoff has
//     backed off for them and turns remain (turn < maxAttempts), so a
//     fresh turn may start. They pass too when a turn of them is being
//     watched (monitoring), so they are live already.
//
// These guardrails are for applies only: nothing here may ever hold back a
// rollback, which pause and freeze windows never block (section 4). An
// error means a freeze window cannot be evaluated; the caller should not
// apply.
func CheckApply(now time.Time, spec v1alpha1.PolicySpec, status *v1alpha1.RightsizingRecommendationStatus, running, desired []v1alpha1.ContainerResources) (*Block, error) {
	s := spec.DeepCopy()
	s.SetDefaults()
	if status == nil {
		status = &v1alpha1.RightsizingRecommendationStatus{}
	}

	if s.Guardrails.Paused {
		return &Block{Reason: v1alpha1.ReasonPaused, Message: "the policy pauses applies (spec.guardrails.paused is true)"}, nil
	}

	active, until, which, err := FreezeActive(now, s.Guardrails.FreezeWindows)
	if err != nil {
		return nil, err
	}
	if active {
		w := s.Guardrails.FreezeWindows[which]
		return &Block{
			Reason:  v1alpha1.ReasonFreezeWindow,
			Message: fmt.Sprintf("freeze window %q (%s) is active until %s", w.Schedule, w.TimeZone, until.UTC().Format(time.RFC3339)),
			Until:   &until,
		}, nil
	}

	fp := ValueFingerprint(desired)
	rb := status.Rollback
	maxAttempts := s.Guardrails.Rollback.Backoff.MaxAttempts
	same := rb != nil && rb.Fingerprint == fp
	retry := same && rb.State == v1alpha1.BackoffBackedOff && rb.Turn < maxAttempts
	if !retry {
		if b := cooldownBlock(now, status.Cooldowns, running, desired); b != nil {
			return b, nil
		}
	}

	if same && rb.State == v1alpha1.BackoffFailedPermanent {
		if Reopened(rb, Fingerprint(*s)) {
			return nil, nil // a changed policy: a fresh run
		}
		return &Block{
			Reason:  v1alpha1.ReasonFailedPermanent,
			Message: fmt.Sprintf("values %s were rolled back on each of %d attempts; the backoff gave up on them under this policy (a change of the policy reopens them)", fp, rb.Turn),
		}, nil
	}
	if slices.Contains(status.RolledBackFingerprints, fp) {
		turnsLeft := same && rb.Turn < maxAttempts
		if (turnsLeft && rb.State == v1alpha1.BackoffBackedOff) || (rb != nil && rb.Fingerprint == fp && rb.State == v1alpha1.BackoffMonitoring) {
			return nil, nil
		}
		b := &Block{
			Reason:  v1alpha1.ReasonSameValues,
			Message: fmt.Sprintf("values %s were rolled back before and the backoff allows no new turn (maxAttempts %d)", fp, maxAttempts),
		}
		if turnsLeft && rb.State == v1alpha1.BackoffBackingOff && rb.Expiry != nil {
			t := rb.Expiry.Time
			b.Until = &t
			b.Message = fmt.Sprintf("values %s were rolled back on turn %d of %d; the backoff ends at %s", fp, rb.Turn, maxAttempts, t.UTC().Format(time.RFC3339))
		}
		return b, nil
	}
	return nil, nil
}

// cooldownBlock finds the decreases a running cooldown forbids
// (docs/design.md section 4).
func cooldownBlock(now time.Time, cooldowns []v1alpha1.Cooldown, running, desired []v1alpha1.ContainerResources) *Block {
	var msgs []string
	var until time.Time
	cds := slices.Clone(cooldowns)
	slices.SortFunc(cds, func(a, b v1alpha1.Cooldown) int { return strings.Compare(string(a.Resource), string(b.Resource)) })
	for _, cd := range cds {
		if !now.Before(cd.Until.Time) {
			continue
		}
		dec, ok := firstDecrease(cd.Resource, running, desired)
		if !ok {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("a cooldown after a rollback blocks decreases of %s until %s: %s", cd.Resource, cd.Until.UTC().Format(time.RFC3339), dec))
		if cd.Until.After(until) {
			until = cd.Until.Time
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &Block{Reason: v1alpha1.ReasonCooldown, Message: strings.Join(msgs, "; "), Until: &until}
}

// firstDecrease describes the first value of resource r that desired sets
// below running, in container order, requests before limits.
func firstDecrease(r v1alpha1.ResourceName, running, desired []v1alpha1.ContainerResources) (string, bool) {
	for _, d := range desired {
		i := slices.IndexFunc(running, func(c v1alpha1.ContainerResources) bool { return c.Name == d.Name })
		if i < 0 {
			continue
		}
		cur := running[i]
		for _, part := range []struct {
			name      string
			want, has *v1alpha1.ResourceValues
		}{{"requests", d.Requests, cur.Requests}, {"limits", d.Limits, cur.Limits}} {
			want, has := value(part.want, r), value(part.has, r)
			if want != nil && has != nil && want.Cmp(*has) < 0 {
				return fmt.Sprintf("container %q %s.%s %s is below the running %s", d.Name, part.name, r, want, has), true
			}
		}
	}
	return "", false
}

// value picks resource r out of v; nil when absent.
func value(v *v1alpha1.ResourceValues, r v1alpha1.ResourceName) *resource.Quantity {
	if v == nil {
		return nil
	}
	switch r {
	case v1alpha1.ResourceCPU:
		return v.CPU
	case v1alpha1.ResourceMemory:
		return v.Memory
	}
	return nil
}

// mergeHorizon bounds how far past now FreezeActive follows windows that
// open before the previous one closes. A window every 5 minutes that lasts
// 7 never closes. Past the horizon the until FreezeActive reports is
// early, which only makes the caller check again sooner.
const mergeHorizon = 30 * 24 * time.Hour

// maxFireSteps bounds the fire times openAt walks through in one call.
const maxFireSteps = 10000

// FreezeActive reports whether any freeze window is open at now
// (docs/design.md section 2). A window opens at each time its cron
// schedule fires in its IANA time zone, UTC when empty. The schedule has
// 5 fields, in standard syntax. The window stays open for its duration:
// open at its start, closed at its end.
// until is when no window is open any more: windows that overlap or touch
// are followed through, up to 30 days ahead (mergeHorizon). which is the
// index of the window open at now that closes last. A schedule, time zone
// or duration that cannot be used is an error naming the field.
func FreezeActive(now time.Time, windows []v1alpha1.FreezeWindow) (active bool, until time.Time, which int, err error) {
	parsed := make([]freezeWindow, len(windows))
	for i, w := range windows {
		if parsed[i], err = parseWindow(i, w); err != nil {
			return false, time.Time{}, -1, err
		}
	}
	which = -1
	for i, w := range parsed {
		if open, end := w.openAt(now); open && (which < 0 || end.After(until)) {
			which, until = i, end
		}
	}
	if which < 0 {
		return false, time.Time{}, -1, nil
	}
	for until.Sub(now) < mergeHorizon {
		extended := false
		for _, w := range parsed {
			if open, end := w.openAt(until); open && end.After(until) {
				until, extended = end, true
			}
		}
		if !extended {
			break
		}
	}
	return true, until, which, nil
}

// freezeWindow is a FreezeWindow ready to evaluate.
type freezeWindow struct {
	schedule cron.Schedule
	loc      *time.Location
	duration time.Duration
}

// cronParser reads the 5-field schedules of spec.guardrails.freezeWindows,
// without descriptors such as @daily, which the CRD does not allow either.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

func parseWindow(i int, w v1alpha1.FreezeWindow) (freezeWindow, error) {
	field := fmt.Sprintf("spec.guardrails.freezeWindows[%d]", i)
	tz := w.TimeZone
	if tz == "" {
		tz = v1alpha1.DefaultTimeZone
	}
	if tz == "Local" {
		return freezeWindow{}, fmt.Errorf("%s.timeZone: %q is not allowed: want an IANA time zone such as UTC or Europe/Paris", field, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return freezeWindow{}, fmt.Errorf("%s.timeZone: unknown time zone %q, want an IANA time zone such as UTC or Europe/Paris: %w", field, tz, err)
	}
	if strings.Contains(w.Schedule, "=") {
		return freezeWindow{}, fmt.Errorf("%s.schedule: %q: a time zone belongs in timeZone, not in the schedule", field, w.Schedule)
	}
	sched, err := cronParser.Parse(w.Schedule)
	if err != nil {
		return freezeWindow{}, fmt.Errorf("%s.schedule: %q is not a cron schedule of 5 fields (minute hour day-of-month month day-of-week) such as \"0 9 * * 1-5\": %w", field, w.Schedule, err)
	}
	if w.Duration.Duration <= 0 {
		return freezeWindow{}, fmt.Errorf("%s.duration: %s must be positive, such as 2h", field, w.Duration.Duration)
	}
	return freezeWindow{schedule: sched, loc: loc, duration: w.Duration.Duration}, nil
}

// openAt reports whether the window is open at t and, if so, when the
// latest opening that covers t closes. The openings that cover t are the
// fire times in (t-duration, t]. cron only steps forward. So the search
// looks back from t over a span that doubles up to the duration. Then it
// steps forward from the first fire it finds while the next is still ≤ t.
func (w freezeWindow) openAt(t time.Time) (bool, time.Time) {
	var fire time.Time
	for span := time.Minute; ; span *= 2 {
		span = min(span, w.duration)
		fire = w.schedule.Next(t.Add(-span).In(w.loc))
		if !fire.IsZero() && !fire.After(t) {
			break
		}
		if span == w.duration {
			return false, time.Time{}
		}
	}
	for range maxFireSteps {
		next := w.schedule.Next(fire)
		if next.IsZero() || next.After(t) {
			break
		}
		fire = next
	}
	return true, fire.Add(w.duration)
}

// AddCooldown records that decreases of resource stay blocked until until
// (docs/design.md section 4: after a rollback of that resource). An
// existing cooldown of the resource is kept when it ends later, and moved
// to until otherwise, so a second rollback never shortens the first's.
// until is rounded up to the second, the precision status keeps.
func AddCooldown(status *v1alpha1.RightsizingRecommendationStatus, resource v1alpha1.ResourceName, until time.Time) {
	until = ceilSecond(until)
	for i := range status.Cooldowns {
		if status.Cooldowns[i].Resource == resource {
			if until.After(status.Cooldowns[i].Until.Time) {
				status.Cooldowns[i].Until = metav1.NewTime(until)
			}
			return
		}
	}
	status.Cooldowns = append(status.Cooldowns, v1alpha1.Cooldown{Resource: resource, Until: metav1.NewTime(until)})
}

// ceilSecond rounds t up to a whole second: metav1.Time keeps only seconds,
// and a stored end must not come earlier than the one decided.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); r.Before(t) {
		return r.Add(time.Second)
	}
	return t
}

// AddRolledBackFingerprint records that the values of fingerprint were
// rolled back, so CheckApply does not apply them again unless the backoff
// allows it (docs/design.md section 4). The list is a set; when full, the
// oldest fingerprint makes room.
func AddRolledBackFingerprint(status *v1alpha1.RightsizingRecommendationStatus, fingerprint string) {
	if slices.Contains(status.RolledBackFingerprints, fingerprint) {
		return
	}
	status.RolledBackFingerprints = append(status.RolledBackFingerprints, fingerprint)
	if n := len(status.RolledBackFingerprints); n > v1alpha1.MaxRolledBackFingerprints {
		status.RolledBackFingerprints = slices.Clone(status.RolledBackFingerprints[n-v1alpha1.MaxRolledBackFingerprints:])
	}
}

// Unjudged reports whether the recommendation's change has not been
// judged by its watch yet, and when it was applied. Such a change is being
// applied, applied and not watched yet, watched, or breached and not
// restored. A change that passed its watch (Healthy) or whose rollback
// was restored is judged. No new change may end such a watch
// (docs/health.md, "A change while another is watched"). The reconciler
// holds a newer generation until it ends, and the recommender asks for
// nothing new.
func Unjudged(st *v1alpha1.RightsizingRecommendationStatus) (appliedAt time.Time, ok bool) {
	c := st.Change
	if c == nil {
		return time.Time{}, false
	}
	switch {
	case st.Breach != nil && !st.Breach.Restored,
		st.Phase == v1alpha1.PhaseApplied, st.Phase == v1alpha1.PhaseWatching:
		return c.AppliedAt.Time, true
	}
	if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionApplied); cond != nil &&
		cond.Status != metav1.ConditionTrue && cond.Reason == v1alpha1.AppliedReasonApplying {
		return c.AppliedAt.Time, true
	}
	return time.Time{}, false
}
