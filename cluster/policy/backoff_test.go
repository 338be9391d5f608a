package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func mt(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// gov is the policy the tests' transitions run under.
var gov = v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindNamespaced, Name: "p", Fingerprint: "pf1"}

func TestBackoffFullRunEndsFailedPermanent(t *testing.T) {
	backoff := v1alpha1.Backoff{TimePeriod: dur(10 * time.Second), MultiplyByTurn: 1, MaxAttempts: 2}
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{Backoff: backoff}}}
	desired := []v1alpha1.ContainerResources{cr("app", "250m", "128Mi", "", "")}
	fp := ValueFingerprint(desired)
	gov := v1alpha1.PolicyReference{Kind: v1alpha1.PolicyKindNamespaced, Name: "p", Fingerprint: Fingerprint(spec)}
	t0 := at("2026-12-01T10:00:00Z")
	st := &v1alpha1.RollbackState{}
	status := &v1alpha1.RightsizingRecommendationStatus{}

	steps := []struct {
		name       string
		at         time.Duration // after t0
		do         func(now time.Time) ([]string, error)
		wantEvents []string
		wantState  v1alpha1.BackoffState
		wantTurn   int32
		wantBlock  string // CheckApply's reason for the same values afterwards; "-" skips the check
	}{
		{"apply starts turn 1", 0,
			func(now time.Time) ([]string, error) { return StartMonitoring(now, st, fp, gov) },
			[]string{v1alpha1.EventMonitoringStarted}, v1alpha1.BackoffMonitoring, 1, ""},
		{"an OOM kill rolls back", time.Minute,
			func(now time.Time) ([]string, error) {
				AddRolledBackFingerprint(status, fp)
				return RollingBack(now, st, v1alpha1.HealthWatchOOMKills, "", nil)
			},
			[]string{v1alpha1.EventRollingBackStarted}, v1alpha1.BackoffRollingBack, 1, v1alpha1.ReasonSameValues},
		{"the restore is done: back off 10s", time.Minute + 5*time.Second,
			func(now time.Time) ([]string, error) { return BackingOff(now, st, backoff) },
			nil, v1alpha1.BackoffBackingOff, 1, v1alpha1.ReasonSameValues},
		{"a second before the expiry nothing moves", time.Minute + 14*time.Second,
			func(now time.Time) ([]string, error) { _, ev := Advance(now, st, gov, backoff); return ev, nil },
			nil, v1alpha1.BackoffBackingOff, 1, v1alpha1.ReasonSameValues},
		{"at the expiry turns remain: backed off", time.Minute + 15*time.Second,
			func(now time.Time) ([]string, error) { _, ev := Advance(now, st, gov, backoff); return ev, nil },
			[]string{v1alpha1.EventBackoffTurnCompleted}, v1alpha1.BackoffBackedOff, 1, ""},
		{"the same values start turn 2", 2 * time.Minute,
			func(now time.Time) ([]string, error) { return StartMonitoring(now, st, fp, gov) },
			[]string{v1alpha1.EventMonitoringStarted}, v1alpha1.BackoffMonitoring, 2, ""},
		{"restarts roll turn 2 back", 3 * time.Minute,
			func(now time.Time) ([]string, error) {
				return RollingBack(now, st, v1alpha1.HealthWatchRestarts, "", nil)
			},
			[]string{v1alpha1.EventRollingBackStarted}, v1alpha1.BackoffRollingBack, 2, v1alpha1.ReasonSameValues},
		{"turn 2 backs off 20s", 3 * time.Minute,
			func(now time.Time) ([]string, error) { return BackingOff(now, st, backoff) },
			nil, v1alpha1.BackoffBackingOff, 2, v1alpha1.ReasonSameValues},
		{"at the expiry no turn remains: failed permanently", 3*time.Minute + 20*time.Second,
			func(now time.Time) ([]string, error) { _, ev := Advance(now, st, gov, backoff); return ev, nil },
			[]string{v1alpha1.EventBackoffExhausted}, v1alpha1.BackoffFailedPermanent, 2, v1alpha1.ReasonFailedPermanent},
		{"nothing moves afterwards", time.Hour,
			func(now time.Time) ([]string, error) { _, ev := Advance(now, st, gov, backoff); return ev, nil },
			nil, v1alpha1.BackoffFailedPermanent, 2, v1alpha1.ReasonFailedPermanent},
	}
	for _, step := range steps {
		now := t0.Add(step.at)
		events, err := step.do(now)
		require.NoError(t, err, step.name)
		assert.Equal(t, step.wantEvents, events, step.name)
		assert.Equal(t, step.wantState, st.State, step.name)
		assert.Equal(t, step.wantTurn, st.Turn, step.name)
		assert.Equal(t, fp, st.Fingerprint, step.name)

		status.Rollback = st
		b, err := CheckApply(now, spec, status, nil, desired)
		require.NoError(t, err, step.name)
		switch step.wantBlock {
		case "":
			assert.Nil(t, b, step.name)
		default:
			if assert.NotNil(t, b, step.name) {
				assert.Equal(t, step.wantBlock, b.Reason, step.name)
			}
		}
	}

	assert.Equal(t, mt(t0.Add(3*time.Minute+20*time.Second)), st.Expiry)
	assert.Equal(t, []v1alpha1.BackoffTurn{
		{Turn: 1, StartedAt: metav1.NewTime(t0), EndedAt: mt(t0.Add(time.Minute)), Outcome: v1alpha1.OutcomeRolledBack, Reason: v1alpha1.HealthWatchOOMKills},
		{Turn: 2, StartedAt: metav1.NewTime(t0.Add(2 * time.Minute)), EndedAt: mt(t0.Add(3 * time.Minute)), Outcome: v1alpha1.OutcomeRolledBack, Reason: v1alpha1.HealthWatchRestarts},
	}, st.Turns)

	got, err := AnnotationValue(st)
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{
		"state": "failedPermanent",
		"turn": 2,
		"expiry": "2026-12-01T10:03:20Z",
		"fingerprint": %q,
		"policy": {"kind": "RightsizingPolicy", "name": "p", "fingerprint": %q},
		"reason": "Restarts",
		"turns": [
			{"turn": 1, "startedAt": "2026-12-01T10:00:00Z", "endedAt": "2026-12-01T10:01:00Z", "outcome": "RolledBack", "reason": "OOMKills"},
			{"turn": 2, "startedAt": "2026-12-01T10:02:00Z", "endedAt": "2026-12-01T10:03:00Z", "outcome": "RolledBack", "reason": "Restarts"}
		]}`, fp, gov.Fingerprint), got)
}

func TestBackoffExpiryIsTimePeriodTimesMultiplyByTurnTimesTurn(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	tests := []struct {
		name    string
		backoff v1alpha1.Backoff
		turn    int32
		want    time.Duration
	}{
		{"turn 1", v1alpha1.Backoff{TimePeriod: dur(10 * time.Second), MultiplyByTurn: 1}, 1, 10 * time.Second},
		{"turn 2", v1alpha1.Backoff{TimePeriod: dur(10 * time.Second), MultiplyByTurn: 1}, 2, 20 * time.Second},
		{"multiplyByTurn 2, turn 3", v1alpha1.Backoff{TimePeriod: dur(10 * time.Second), MultiplyByTurn: 2}, 3, 60 * time.Second},
		{"defaults: 10m × 1 × 1", v1alpha1.Backoff{}, 1, 10 * time.Minute},
		{"saturates instead of overflowing", v1alpha1.Backoff{TimePeriod: dur(1 << 62), MultiplyByTurn: 4}, 3, 1<<63 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, BackoffDuration(tt.backoff, tt.turn))
			if tt.want > 24*time.Hour {
				return
			}
			st := &v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: tt.turn, Fingerprint: "f"}
			events, err := BackingOff(now, st, tt.backoff)
			require.NoError(t, err)
			assert.Empty(t, events)
			assert.Equal(t, v1alpha1.BackoffBackingOff, st.State)
			assert.Equal(t, mt(now.Add(tt.want)), st.Expiry)
		})
	}
}

func TestBackingOffExpiryRoundsUpToTheSecond(t *testing.T) {
	st := &v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: 1, Fingerprint: "f"}
	_, err := BackingOff(at("2026-12-01T10:00:00.2Z"), st, v1alpha1.Backoff{TimePeriod: dur(10 * time.Second)})
	require.NoError(t, err)
	assert.Equal(t, at("2026-12-01T10:00:11Z"), st.Expiry.UTC())
}

func TestAdvanceAtTheExpiry(t *testing.T) {
	expiry := at("2026-12-01T10:00:10Z")
	tests := []struct {
		name        string
		now         time.Time
		turn        int32
		maxAttempts int32
		expiry      *metav1.Time
		wantChanged bool
		wantState   v1alpha1.BackoffState
		wantEvents  []string
	}{
		{"a nanosecond before", expiry.Add(-time.Nanosecond), 1, 2, mt(expiry), false, v1alpha1.BackoffBackingOff, nil},
		{"at the expiry with turns left", expiry, 1, 2, mt(expiry), true, v1alpha1.BackoffBackedOff, []string{v1alpha1.EventBackoffTurnCompleted}},
		{"after the expiry on the last turn", expiry.Add(time.Hour), 2, 2, mt(expiry), true, v1alpha1.BackoffFailedPermanent, []string{v1alpha1.EventBackoffExhausted}},
		{"default maxAttempts 1 never retries", expiry, 1, 0, mt(expiry), true, v1alpha1.BackoffFailedPermanent, []string{v1alpha1.EventBackoffExhausted}},
		{"maxAttempts lowered below the turn", expiry, 3, 2, mt(expiry), true, v1alpha1.BackoffFailedPermanent, []string{v1alpha1.EventBackoffExhausted}},
		{"no expiry counts as expired", expiry, 1, 2, nil, true, v1alpha1.BackoffBackedOff, []string{v1alpha1.EventBackoffTurnCompleted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: tt.turn, Fingerprint: "f", Expiry: tt.expiry}
			changed, events := Advance(tt.now, st, gov, v1alpha1.Backoff{MaxAttempts: tt.maxAttempts})
			assert.Equal(t, tt.wantChanged, changed)
			assert.Equal(t, tt.wantState, st.State)
			assert.Equal(t, tt.wantEvents, events)
		})
	}
}

func TestAdvanceOutsideBackingOffChangesNothing(t *testing.T) {
	for _, s := range []v1alpha1.BackoffState{"", v1alpha1.BackoffMonitoring, v1alpha1.BackoffMonitoringSucceeded, v1alpha1.BackoffRollingBack, v1alpha1.BackoffBackedOff, v1alpha1.BackoffFailedPermanent} {
		t.Run(string(s), func(t *testing.T) {
			st := &v1alpha1.RollbackState{State: s, Turn: 1, Fingerprint: "f", Expiry: mt(epoch)}
			before := st.DeepCopy()
			changed, events := Advance(epoch.Add(time.Hour), st, gov, v1alpha1.Backoff{MaxAttempts: 3})
			assert.False(t, changed)
			assert.Empty(t, events)
			assert.Equal(t, before, st)
		})
	}
}

func TestStartMonitoringTurns(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	earlier := []v1alpha1.BackoffTurn{{Turn: 1, StartedAt: metav1.NewTime(epoch), EndedAt: mt(epoch), Outcome: v1alpha1.OutcomeRolledBack}}
	tests := []struct {
		name       string
		st         v1alpha1.RollbackState
		fp         string
		wantTurn   int32
		wantTurns  int
		wantEvents []string
	}{
		{"first values", v1alpha1.RollbackState{}, "a", 1, 1, []string{v1alpha1.EventMonitoringStarted}},
		{"same values back from backedOff take the next turn",
			v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 1, Fingerprint: "a", Expiry: mt(epoch), Turns: earlier}, "a", 2, 2, []string{v1alpha1.EventMonitoringStarted}},
		{"new values reset to turn 1",
			v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 1, Fingerprint: "a", Turns: earlier}, "b", 1, 1, []string{v1alpha1.EventMonitoringStarted}},
		{"new values while others fail permanently",
			v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 3, Fingerprint: "a", Turns: earlier}, "b", 1, 1, []string{v1alpha1.EventMonitoringStarted}},
		{"same values after they succeeded start over",
			v1alpha1.RollbackState{State: v1alpha1.BackoffMonitoringSucceeded, Turn: 2, Fingerprint: "a", Turns: earlier}, "a", 1, 1, []string{v1alpha1.EventMonitoringStarted}},
		{"already monitoring the same values: nothing to do",
			v1alpha1.RollbackState{State: v1alpha1.BackoffMonitoring, Turn: 2, Fingerprint: "a", Turns: earlier}, "a", 2, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st.DeepCopy()
			events, err := StartMonitoring(now, st, tt.fp, gov)
			require.NoError(t, err)
			assert.Equal(t, tt.wantEvents, events)
			assert.Equal(t, v1alpha1.BackoffMonitoring, st.State)
			assert.Equal(t, tt.fp, st.Fingerprint)
			assert.Equal(t, tt.wantTurn, st.Turn)
			require.Len(t, st.Turns, tt.wantTurns)
			if tt.wantEvents != nil {
				assert.Nil(t, st.Expiry)
				assert.Equal(t, v1alpha1.BackoffTurn{Turn: tt.wantTurn, StartedAt: metav1.NewTime(now)}, st.Turns[len(st.Turns)-1])
			}
		})
	}
}

func TestTransitionsRepeatedChangeNothing(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	backoff := v1alpha1.Backoff{TimePeriod: dur(time.Minute)}
	tests := []struct {
		name string
		st   v1alpha1.RollbackState
		do   func(*v1alpha1.RollbackState) ([]string, error)
	}{
		{"monitoring succeeded", v1alpha1.RollbackState{State: v1alpha1.BackoffMonitoringSucceeded, Turn: 1, Fingerprint: "f"},
			func(st *v1alpha1.RollbackState) ([]string, error) { return MonitoringSucceeded(now, st, nil) }},
		{"rolling back, as a leader taking over would", v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: 1, Fingerprint: "f"},
			func(st *v1alpha1.RollbackState) ([]string, error) { return RollingBack(now, st, "OOMKills", "", nil) }},
		{"backing off keeps the first expiry", v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: 1, Fingerprint: "f", Expiry: mt(epoch)},
			func(st *v1alpha1.RollbackState) ([]string, error) { return BackingOff(now, st, backoff) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st.DeepCopy()
			events, err := tt.do(st)
			require.NoError(t, err)
			assert.Empty(t, events)
			assert.Equal(t, &tt.st, st)
		})
	}
}

func TestMonitoringEndsTheTurn(t *testing.T) {
	t0 := at("2026-12-01T10:00:00Z")
	st := &v1alpha1.RollbackState{}
	_, err := StartMonitoring(t0, st, "f", gov)
	require.NoError(t, err)
	events, err := MonitoringSucceeded(t0.Add(30*time.Minute), st, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{v1alpha1.EventMonitoringSucceeded}, events)
	assert.Equal(t, v1alpha1.BackoffMonitoringSucceeded, st.State)
	assert.Equal(t, []v1alpha1.BackoffTurn{{Turn: 1, StartedAt: metav1.NewTime(t0), EndedAt: mt(t0.Add(30 * time.Minute)), Outcome: v1alpha1.OutcomeHealthy}}, st.Turns)
}

func TestIllegalTransitionsAreErrors(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	backoff := v1alpha1.Backoff{}
	tests := []struct {
		name string
		from v1alpha1.BackoffState
		do   func(*v1alpha1.RollbackState) ([]string, error)
	}{
		{"same values while rolling back", v1alpha1.BackoffRollingBack, func(st *v1alpha1.RollbackState) ([]string, error) { return StartMonitoring(now, st, "f", gov) }},
		{"same values while backing off", v1alpha1.BackoffBackingOff, func(st *v1alpha1.RollbackState) ([]string, error) { return StartMonitoring(now, st, "f", gov) }},
		{"same values after failing permanently", v1alpha1.BackoffFailedPermanent, func(st *v1alpha1.RollbackState) ([]string, error) { return StartMonitoring(now, st, "f", gov) }},
		{"success without monitoring", v1alpha1.BackoffBackedOff, func(st *v1alpha1.RollbackState) ([]string, error) { return MonitoringSucceeded(now, st, nil) }},
		{"success during a rollback", v1alpha1.BackoffRollingBack, func(st *v1alpha1.RollbackState) ([]string, error) { return MonitoringSucceeded(now, st, nil) }},
		{"rollback after success", v1alpha1.BackoffMonitoringSucceeded, func(st *v1alpha1.RollbackState) ([]string, error) { return RollingBack(now, st, "Restarts", "", nil) }},
		{"rollback with no state", "", func(st *v1alpha1.RollbackState) ([]string, error) { return RollingBack(now, st, "Restarts", "", nil) }},
		{"backoff without a rollback", v1alpha1.BackoffMonitoring, func(st *v1alpha1.RollbackState) ([]string, error) { return BackingOff(now, st, backoff) }},
		{"backoff after failing permanently", v1alpha1.BackoffFailedPermanent, func(st *v1alpha1.RollbackState) ([]string, error) { return BackingOff(now, st, backoff) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &v1alpha1.RollbackState{State: tt.from, Turn: 1, Fingerprint: "f"}
			before := st.DeepCopy()
			events, err := tt.do(st)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "is not a transition of the backoff state machine")
			assert.Empty(t, events)
			assert.Equal(t, before, st)
		})
	}
}

func TestTurnsKeepTheNewestHundred(t *testing.T) {
	st := &v1alpha1.RollbackState{}
	now := at("2026-12-01T10:00:00Z")
	backoff := v1alpha1.Backoff{TimePeriod: dur(time.Second), MaxAttempts: 150}
	_, err := StartMonitoring(now, st, "f", gov)
	require.NoError(t, err)
	for range 149 {
		_, err = RollingBack(now, st, "OOMKills", "", nil)
		require.NoError(t, err)
		_, err = BackingOff(now, st, backoff)
		require.NoError(t, err)
		now = st.Expiry.Time
		changed, _ := Advance(now, st, gov, backoff)
		require.True(t, changed)
		_, err = StartMonitoring(now, st, "f", gov)
		require.NoError(t, err)
	}
	assert.Equal(t, int32(150), st.Turn)
	require.Len(t, st.Turns, 100)
	assert.Equal(t, int32(51), st.Turns[0].Turn)
	assert.Equal(t, int32(150), st.Turns[99].Turn)
}

func TestClearForNoPolicyKeepsWhatBlocksHarm(t *testing.T) {
	cooldowns := []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(epoch)}}
	status := &v1alpha1.RightsizingRecommendationStatus{
		Change:                 &v1alpha1.Change{ValueFingerprint: "f"},
		Breach:                 &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, Restored: true},
		Rollback:               &v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: 1, Fingerprint: "f"},
		Cooldowns:              cooldowns,
		RolledBackFingerprints: []string{"f"},
	}
	events, ok := ClearForNoPolicy(status)
	require.True(t, ok)
	assert.Equal(t, []string{v1alpha1.EventStateCleared}, events)
	assert.Nil(t, status.Rollback)
	assert.Nil(t, status.Change, "the change goes with its state")
	assert.Nil(t, status.Breach, "and so does its breach: nothing is left half of a rollback")
	assert.Equal(t, cooldowns, status.Cooldowns)
	assert.Equal(t, []string{"f"}, status.RolledBackFingerprints)
	events, ok = ClearForNoPolicy(status)
	assert.True(t, ok)
	assert.Empty(t, events, "nothing left to clear")
	typ, _ := Describe(v1alpha1.EventStateCleared, nil)
	assert.Equal(t, corev1.EventTypeNormal, typ, "clearing the state is no warning")
}

func TestClearForNoPolicyRefusesAnUnfinishedRollback(t *testing.T) {
	status := &v1alpha1.RightsizingRecommendationStatus{
		Change:   &v1alpha1.Change{ValueFingerprint: "f"},
		Breach:   &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills},
		Rollback: &v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: 1, Fingerprint: "f"},
	}
	before := status.DeepCopy()
	events, ok := ClearForNoPolicy(status)
	assert.False(t, ok, "the restore is finished first")
	assert.Empty(t, events)
	assert.Equal(t, before, status)
}

func TestStateCarriesFailureRestoringAndLastKnownGood(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	good := &v1alpha1.HealthyValues{At: metav1.NewTime(now), ValueFingerprint: "g", Containers: []v1alpha1.ContainerResources{cr("app", "500m", "256Mi", "", "")}}
	st := &v1alpha1.RollbackState{}
	_, err := StartMonitoring(now, st, "g", gov)
	require.NoError(t, err)
	assert.Equal(t, &gov, st.Policy)
	_, err = MonitoringSucceeded(now, st, good)
	require.NoError(t, err)
	assert.Equal(t, good, st.LastKnownGood)

	_, err = StartMonitoring(now, st, "f", gov)
	require.NoError(t, err)
	assert.Equal(t, good, st.LastKnownGood, "other values keep the last known good ones")
	restoring := []v1alpha1.ContainerResources{cr("app", "", "256Mi", "", "")}
	_, err = RollingBack(now, st, v1alpha1.HealthWatchOOMKills, "oomKills 1 ≥ 1", restoring)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, st.Reason)
	assert.Equal(t, "oomKills 1 ≥ 1", st.Message)
	assert.Equal(t, restoring, st.Restoring)
	backoff := v1alpha1.Backoff{TimePeriod: dur(time.Second), MaxAttempts: 2}
	_, err = BackingOff(now, st, backoff)
	require.NoError(t, err)
	assert.Equal(t, restoring, st.Restoring, "visible while backing off")
	changed, _ := Advance(st.Expiry.Time, st, gov, backoff)
	require.True(t, changed)
	assert.Empty(t, st.Restoring, "cleared when the turn completes")
	assert.Len(t, st.Turns, 1, "the history stays")
	assert.Equal(t, v1alpha1.HealthWatchOOMKills, st.Turns[0].Reason)
	_, err = StartMonitoring(now, st, "f", gov)
	require.NoError(t, err)
	assert.Empty(t, st.Reason, "a new turn runs")
	assert.Empty(t, st.Message)
	assert.Equal(t, good, st.LastKnownGood)
}

func TestFailedPermanentIsPerPolicyState(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	st := &v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 3, Fingerprint: "f", Policy: &gov}
	_, err := StartMonitoring(now, st, "f", gov)
	require.Error(t, err, "the same policy never retries failedPermanent values")
	assert.False(t, Reopened(st, gov.Fingerprint))

	changed := gov
	changed.Fingerprint = "pf2"
	require.True(t, Reopened(st, changed.Fingerprint))
	events, err := StartMonitoring(now, st, "f", changed)
	require.NoError(t, err)
	assert.Equal(t, []string{v1alpha1.EventMonitoringStarted}, events)
	assert.Equal(t, v1alpha1.BackoffMonitoring, st.State)
	assert.Equal(t, int32(1), st.Turn, "a fresh run")
	assert.Equal(t, "pf2", st.Policy.Fingerprint)

	assert.False(t, Reopened(&v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Fingerprint: "f"}, "pf2"),
		"a verdict without a recorded policy holds")
}

func TestAnnotationValueRoundTrips(t *testing.T) {
	st := &v1alpha1.RollbackState{
		State: v1alpha1.BackoffBackingOff, Turn: 2, Fingerprint: "0123456789abcdef", Expiry: mt(at("2026-12-01T10:00:20Z")),
		Turns: []v1alpha1.BackoffTurn{{Turn: 1, StartedAt: metav1.NewTime(at("2026-12-01T09:00:00Z"))}},
	}
	v, err := AnnotationValue(st)
	require.NoError(t, err)
	back, err := ParseAnnotation(v)
	require.NoError(t, err)
	assert.Equal(t, st.State, back.State)
	assert.Equal(t, st.Turn, back.Turn)
	assert.True(t, st.Expiry.Equal(back.Expiry))
	assert.True(t, st.Turns[0].StartedAt.Equal(&back.Turns[0].StartedAt))

	v, err = AnnotationValue(nil)
	require.NoError(t, err)
	assert.Empty(t, v, "no state: remove the annotation")
	back, err = ParseAnnotation("")
	require.NoError(t, err)
	assert.Nil(t, back)

	_, err = ParseAnnotation("{")
	require.Error(t, err)
	assert.Contains(t, err.Error(), v1alpha1.RollbackStateAnnotation)
}

func TestDescribeEvents(t *testing.T) {
	st := &v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: 2, Fingerprint: "0123456789abcdef",
		Turns: []v1alpha1.BackoffTurn{{Turn: 2, Reason: "OOMKills"}}}
	tests := []struct {
		reason   string
		wantType string
		wantMsg  string
	}{
		{v1alpha1.EventMonitoringStarted, corev1.EventTypeNormal, "watching values 0123456789abcdef, turn 2"},
		{v1alpha1.EventMonitoringSucceeded, corev1.EventTypeNormal, "passed the health watch on turn 2"},
		{v1alpha1.EventRollingBackStarted, corev1.EventTypeWarning, "rolling back values 0123456789abcdef on turn 2 after OOMKills"},
		{v1alpha1.EventBackoffTurnCompleted, corev1.EventTypeNormal, "may be applied again"},
		{v1alpha1.EventBackoffExhausted, corev1.EventTypeWarning, "on each of 2 turns; they will not be applied again"},
		{v1alpha1.EventStateCleared, corev1.EventTypeNormal, "no policy selects the workload"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			typ, msg := Describe(tt.reason, st)
			assert.Equal(t, tt.wantType, typ)
			assert.Contains(t, msg, tt.wantMsg)
		})
	}
}
