package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// StartMonitoring moves st to monitoring for the values identified by
// fingerprint, just applied under the governing policy, and opens a turn
// (docs/design.md section 4).
//   - The same fingerprint coming back from backedOff starts the next
//     turn.
//   - Any other fingerprint starts over at turn 1 and forgets the old
//     turns. So does the same one after monitoringSucceeded, or
//     failedPermanent under another policy state: governing.Fingerprint
//     differs from the one recorded.
//   - Calling it again while already monitoring the fingerprint changes
//     nothing and emits nothing, so a reconciler may repeat itself.
//
// A start records governing and clears the failure and the values being
// restored; the last known good values stay.
//
// Values in rollingBack or backingOff, or failedPermanent under the same
// policy state, may not start: that is an error, which CheckApply prevents
// by blocking them. st holds one fingerprint at a time, so starting other
// values drops the backoff of the previous ones; those stay blocked as
// SameValues.
func StartMonitoring(now time.Time, st *v1alpha1.RollbackState, fingerprint string, governing v1alpha1.PolicyReference) ([]string, error) {
	if st.Fingerprint == fingerprint {
		switch st.State {
		case v1alpha1.BackoffMonitoring:
			return nil, nil
		case v1alpha1.BackoffBackedOff:
			st.State = v1alpha1.BackoffMonitoring
			st.Turn++
			st.Expiry = nil
			st.Policy = &governing
			st.Reason, st.Message, st.Restoring = "", "", nil
			st.Turns = appendTurn(st.Turns, v1alpha1.BackoffTurn{Turn: st.Turn, StartedAt: metav1.NewTime(now)})
			return []string{v1alpha1.EventMonitoringStarted}, nil
		case v1alpha1.BackoffFailedPermanent:
			if !Reopened(st, governing.Fingerprint) {
				return nil, illegal(st, v1alpha1.BackoffMonitoring)
			}
		case v1alpha1.BackoffRollingBack, v1alpha1.BackoffBackingOff:
			return nil, illegal(st, v1alpha1.BackoffMonitoring)
		}
	}
	*st = v1alpha1.RollbackState{
		State:         v1alpha1.BackoffMonitoring,
		Turn:          1,
		Fingerprint:   fingerprint,
		Policy:        &governing,
		LastKnownGood: st.LastKnownGood,
		Turns:         []v1alpha1.BackoffTurn{{Turn: 1, StartedAt: metav1.NewTime(now)}},
	}
	return []string{v1alpha1.EventMonitoringStarted}, nil
}

// Reopened reports whether failedPermanent values of st may start a fresh
// run under the policy whose fingerprint is policyFingerprint. The verdict
// holds for the policy state that gave it (st.Policy), so only a changed
// policy reopens them (docs/design.md section 4). A state that recorded
// no policy is never reopened.
func Reopened(st *v1alpha1.RollbackState, policyFingerprint string) bool {
	return st != nil && st.State == v1alpha1.BackoffFailedPermanent && st.Policy != nil &&
		st.Policy.Fingerprint != "" && st.Policy.Fingerprint != policyFingerprint
}

// MonitoringSucceeded moves st from monitoring to monitoringSucceeded when
// the health watch ends without a breach (docs/design.md section 4). It
// closes the turn as Healthy and records good as the last known good
// values. Repeating it changes nothing.
func MonitoringSucceeded(now time.Time, st *v1alpha1.RollbackState, good *v1alpha1.HealthyValues) ([]string, error) {
	switch st.State {
	case v1alpha1.BackoffMonitoringSucceeded:
		return nil, nil
	case v1alpha1.BackoffMonitoring:
	default:
		return nil, illegal(st, v1alpha1.BackoffMonitoringSucceeded)
	}
	st.State = v1alpha1.BackoffMonitoringSucceeded
	st.LastKnownGood = good.DeepCopy()
	endTurn(st, now, v1alpha1.OutcomeHealthy, "")
	return []string{v1alpha1.EventMonitoringSucceeded}, nil
}

// RollingBack moves st from monitoring to rollingBack when a breach starts
// a rollback (docs/design.md section 4). It closes the turn as RolledBack
// with the breach's reason, such as OOMKills. It records the failure's
// reason and message and the values being restored, so the workload's
// annotation tells the whole story. Repeating it changes nothing, so a
// leader that takes over mid-rollback does not announce a second one.
func RollingBack(now time.Time, st *v1alpha1.RollbackState, reason, message string, restoring []v1alpha1.ContainerResources) ([]string, error) {
	switch st.State {
	case v1alpha1.BackoffRollingBack:
		return nil, nil
	case v1alpha1.BackoffMonitoring:
	default:
		return nil, illegal(st, v1alpha1.BackoffRollingBack)
	}
	st.State = v1alpha1.BackoffRollingBack
	st.Reason, st.Message = reason, message
	st.Restoring = nil
	for _, c := range restoring {
		st.Restoring = append(st.Restoring, *c.DeepCopy())
	}
	endTurn(st, now, v1alpha1.OutcomeRolledBack, reason)
	return []string{v1alpha1.EventRollingBackStarted}, nil
}

// BackingOff moves st from rollingBack to backingOff once the rollback is
// done (docs/design.md section 4). Its expiry is now + timePeriod ×
// multiplyByTurn × turn, rounded up to the second. It emits no event.
// Repeating it keeps the first expiry.
func BackingOff(now time.Time, st *v1alpha1.RollbackState, backoff v1alpha1.Backoff) ([]string, error) {
	switch st.State {
	case v1alpha1.BackoffBackingOff:
		return nil, nil
	case v1alpha1.BackoffRollingBack:
	default:
		return nil, illegal(st, v1alpha1.BackoffBackingOff)
	}
	st.State = v1alpha1.BackoffBackingOff
	expiry := metav1.NewTime(ceilSecond(now.Add(BackoffDuration(backoff, st.Turn))))
	st.Expiry = &expiry
	return nil, nil
}

// Advance ends a backoff whose expiry has come, now ≥ expiry
// (docs/design.md section 4). st becomes backedOff when turns remain,
// turn < maxAttempts, so the same values may start a fresh turn. Else it
// becomes failedPermanent.
//
// governing is the policy whose backoff decides, recorded in st: a
// failedPermanent verdict holds for it only (see Reopened). The turn is
// complete, so the values being restored are cleared; the turns stay. In
// any other state, or before the expiry, it changes nothing. A backingOff
// state without an expiry counts as expired.
func Advance(now time.Time, st *v1alpha1.RollbackState, governing v1alpha1.PolicyReference, backoff v1alpha1.Backoff) (changed bool, events []string) {
	if st.State != v1alpha1.BackoffBackingOff || (st.Expiry != nil && now.Before(st.Expiry.Time)) {
		return false, nil
	}
	st.Policy = &governing
	st.Restoring = nil
	if st.Turn < withDefaults(backoff).MaxAttempts {
		st.State = v1alpha1.BackoffBackedOff
		return true, []string{v1alpha1.EventBackoffTurnCompleted}
	}
	st.State = v1alpha1.BackoffFailedPermanent
	return true, []string{v1alpha1.EventBackoffExhausted}
}

// ClearForNoPolicy drops the watch and backoff state when no policy
// resolves for the workload any more. Without a policy, changes are not
// watched or rolled back (docs/design.md section 2).
//
// The change, its breach and the backoff state go together
// (status.change, status.breach, status.rollback), so nothing is left half
// of a rollback. The caller first finishes a rollback whose breach is not
// restored yet: a rollback, once decided, is never held back. So
// ClearForNoPolicy refuses one: it returns ok false and changes nothing.
//
// Cooldowns, rolled-back fingerprints, lastHealthy and the history stay.
// They record harm already done, and keep blocking those values when a
// policy comes back. It emits StateCleared when there was a change or a
// state. The caller mirrors the now absent state on the workload, which
// removes the kerf.dev/rollback-state annotation.
func ClearForNoPolicy(status *v1alpha1.RightsizingRecommendationStatus) (events []string, ok bool) {
	if b := status.Breach; b != nil && !b.Restored && status.Change != nil {
		return nil, false
	}
	had := status.Change != nil || status.Rollback != nil || status.Breach != nil
	status.Change, status.Breach, status.Rollback = nil, nil, nil
	if !had {
		return nil, true
	}
	return []string{v1alpha1.EventStateCleared}, true
}

// BackoffDuration is how long turn backs off: timePeriod × multiplyByTurn ×
// turn (docs/design.md section 4), with the defaults for fields left empty.
// It saturates instead of overflowing.
func BackoffDuration(backoff v1alpha1.Backoff, turn int32) time.Duration {
	b := withDefaults(backoff)
	d := b.TimePeriod.Duration
	for _, f := range []int64{max(int64(b.MultiplyByTurn), 1), max(int64(turn), 1)} {
		if d > 0 && f > math.MaxInt64/int64(d) {
			return math.MaxInt64
		}
		d *= time.Duration(f)
	}
	return d
}

// Describe gives the Kubernetes Event type (Normal or Warning) and message
// for one of the Event* reasons, after the transition that emitted it.
func Describe(reason string, st *v1alpha1.RollbackState) (eventType, message string) {
	if st == nil {
		st = &v1alpha1.RollbackState{}
	}
	switch reason {
	case v1alpha1.EventMonitoringStarted:
		return corev1.EventTypeNormal, fmt.Sprintf("watching values %s, turn %d", st.Fingerprint, st.Turn)
	case v1alpha1.EventMonitoringSucceeded:
		return corev1.EventTypeNormal, fmt.Sprintf("values %s passed the health watch on turn %d", st.Fingerprint, st.Turn)
	case v1alpha1.EventRollingBackStarted:
		why := ""
		if n := len(st.Turns); n > 0 && st.Turns[n-1].Reason != "" {
			why = " after " + st.Turns[n-1].Reason
		}
		return corev1.EventTypeWarning, fmt.Sprintf("rolling back values %s on turn %d%s", st.Fingerprint, st.Turn, why)
	case v1alpha1.EventBackoffTurnCompleted:
		return corev1.EventTypeNormal, fmt.Sprintf("backoff after turn %d of values %s is over; they may be applied again", st.Turn, st.Fingerprint)
	case v1alpha1.EventBackoffExhausted:
		return corev1.EventTypeWarning, fmt.Sprintf("values %s were rolled back on each of %d turns; they will not be applied again", st.Fingerprint, st.Turn)
	case v1alpha1.EventStateCleared:
		return corev1.EventTypeNormal, "no policy selects the workload any more; its rollback state was cleared"
	}
	return corev1.EventTypeNormal, reason
}

// AnnotationValue is the JSON of st mirrored in the workload annotation
// kerf.dev/rollback-state, v1alpha1.RollbackStateAnnotation
// (docs/design.md section 4). It is empty for a nil st, meaning the
// annotation is removed.
func AnnotationValue(st *v1alpha1.RollbackState) (string, error) {
	if st == nil {
		return "", nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", v1alpha1.RollbackStateAnnotation, err)
	}
	return string(b), nil
}

// ParseAnnotation reads a kerf.dev/rollback-state annotation back; an
// empty value is no state.
func ParseAnnotation(value string) (*v1alpha1.RollbackState, error) {
	if value == "" {
		return nil, nil
	}
	st := &v1alpha1.RollbackState{}
	if err := json.Unmarshal([]byte(value), st); err != nil {
		return nil, fmt.Errorf("decode %s: %w", v1alpha1.RollbackStateAnnotation, err)
	}
	return st, nil
}

// withDefaults fills the backoff fields left empty (docs/design.md section
// 2 defaults).
func withDefaults(b v1alpha1.Backoff) v1alpha1.Backoff {
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{Backoff: b}}}
	spec.SetDefaults()
	return spec.Guardrails.Rollback.Backoff
}

// endTurn closes the open turn, the last one.
func endTurn(st *v1alpha1.RollbackState, now time.Time, outcome, reason string) {
	if n := len(st.Turns); n > 0 && st.Turns[n-1].EndedAt == nil {
		ended := metav1.NewTime(now)
		st.Turns[n-1].EndedAt = &ended
		st.Turns[n-1].Outcome = outcome
		st.Turns[n-1].Reason = reason
	}
}

// appendTurn adds a turn, keeping the newest v1alpha1.MaxTurns.
func appendTurn(turns []v1alpha1.BackoffTurn, t v1alpha1.BackoffTurn) []v1alpha1.BackoffTurn {
	turns = append(turns, t)
	if len(turns) > v1alpha1.MaxTurns {
		turns = append([]v1alpha1.BackoffTurn(nil), turns[len(turns)-v1alpha1.MaxTurns:]...)
	}
	return turns
}

// illegal is the error for a transition the machine does not have.
func illegal(st *v1alpha1.RollbackState, to v1alpha1.BackoffState) error {
	from := string(st.State)
	if from == "" {
		from = "no state"
	}
	return fmt.Errorf("rollback state of values %s: %s → %s is not a transition of the backoff state machine (docs/design.md section 4)", st.Fingerprint, from, to)
}
