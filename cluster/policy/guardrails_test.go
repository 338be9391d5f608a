package policy

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the tests name IANA zones; do not depend on the host's database

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func window(schedule string, d time.Duration, tz string) v1alpha1.FreezeWindow {
	return v1alpha1.FreezeWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

// officeHours is open 09:00-17:00 UTC on weekdays. 2026-12-01 is a Tuesday,
// 2026-12-05 a Saturday.
var officeHours = window("0 9 * * 1-5", 8*time.Hour, "")

func TestFreezeWindowBoundaries(t *testing.T) {
	tests := []struct {
		name      string
		now       string
		wantOpen  bool
		wantUntil string
	}{
		{"a nanosecond before the start", "2026-12-01T08:59:59.999999999Z", false, ""},
		{"start is inclusive", "2026-12-01T09:00:00Z", true, "2026-12-01T17:00:00Z"},
		{"inside", "2026-12-01T12:34:56.5Z", true, "2026-12-01T17:00:00Z"},
		{"a nanosecond before the end", "2026-12-01T16:59:59.999999999Z", true, "2026-12-01T17:00:00Z"},
		{"end is exclusive", "2026-12-01T17:00:00Z", false, ""},
		{"no window at the weekend", "2026-12-05T10:00:00Z", false, ""},
		{"friday's window", "2026-12-04T16:00:00Z", true, "2026-12-04T17:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, until, which, err := FreezeActive(at(tt.now), []v1alpha1.FreezeWindow{officeHours})
			require.NoError(t, err)
			assert.Equal(t, tt.wantOpen, open)
			if tt.wantOpen {
				assert.Equal(t, at(tt.wantUntil), until.UTC())
				assert.Equal(t, 0, which)
			} else {
				assert.Equal(t, -1, which)
				assert.True(t, until.IsZero())
			}
		})
	}
}

func TestFreezeWindowAcrossMidnightInTimeZone(t *testing.T) {
	// 22:00 to 08:00 Paris time: UTC+1 in January, UTC+2 in July.
	night := window("0 22 * * *", 10*time.Hour, "Europe/Paris")
	tests := []struct {
		name      string
		now       string
		wantOpen  bool
		wantUntil string
	}{
		{"before it opens in winter", "2026-01-14T20:59:59Z", false, ""},
		{"opens at 22:00 Paris in winter", "2026-01-14T21:00:00Z", true, "2026-01-15T07:00:00Z"},
		{"after midnight Paris, before midnight UTC", "2026-01-14T23:30:00Z", true, "2026-01-15T07:00:00Z"},
		{"after midnight both", "2026-01-15T02:00:00Z", true, "2026-01-15T07:00:00Z"},
		{"closes at 08:00 Paris in winter", "2026-01-15T07:00:00Z", false, ""},
		{"opens at 22:00 Paris in summer", "2026-07-14T20:00:00Z", true, "2026-07-15T06:00:00Z"},
		{"closed at 21:30 UTC the next morning in summer", "2026-07-15T06:00:00Z", false, ""},
		// Clocks go forward at 02:00 on 2026-03-29: the window opened at
		// 22:00 CET (21:00Z) still lasts 10 hours, to 09:00 CEST.
		{"lasts its duration across the spring change of clocks", "2026-03-29T06:30:00Z", true, "2026-03-29T07:00:00Z"},
		{"closed after its duration across the spring change", "2026-03-29T07:00:00Z", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, until, _, err := FreezeActive(at(tt.now), []v1alpha1.FreezeWindow{night})
			require.NoError(t, err)
			assert.Equal(t, tt.wantOpen, open)
			if tt.wantOpen {
				assert.Equal(t, at(tt.wantUntil), until.UTC())
			}
		})
	}
}

func TestFreezeWindowsThatOverlapOrTouchMerge(t *testing.T) {
	tests := []struct {
		name      string
		windows   []v1alpha1.FreezeWindow
		now       string
		wantWhich int
		wantUntil string
	}{
		{"second window opens before the first closes",
			[]v1alpha1.FreezeWindow{window("0 9 * * *", 2*time.Hour, ""), window("0 10 * * *", 3*time.Hour, "")},
			"2026-12-01T09:30:00Z", 0, "2026-12-01T13:00:00Z"},
		{"the window open at now that closes last is named",
			[]v1alpha1.FreezeWindow{window("0 9 * * *", 2*time.Hour, ""), window("0 10 * * *", 3*time.Hour, "")},
			"2026-12-01T10:30:00Z", 1, "2026-12-01T13:00:00Z"},
		{"second window opens as the first closes",
			[]v1alpha1.FreezeWindow{window("0 9 * * *", 2*time.Hour, ""), window("0 11 * * *", time.Hour, "")},
			"2026-12-01T09:30:00Z", 0, "2026-12-01T12:00:00Z"},
		{"one schedule firing again while open",
			[]v1alpha1.FreezeWindow{window("0 9,10 * * *", 90*time.Minute, "")},
			"2026-12-01T09:30:00Z", 0, "2026-12-01T11:30:00Z"},
		{"latest opening of a schedule firing twice",
			[]v1alpha1.FreezeWindow{window("0,5 9 * * *", 7*time.Minute, "")},
			"2026-12-01T09:06:00Z", 0, "2026-12-01T09:12:00Z"},
		{"a window that is not open does not count",
			[]v1alpha1.FreezeWindow{window("0 3 * * *", time.Hour, ""), window("0 9 * * *", time.Hour, "")},
			"2026-12-01T09:30:00Z", 1, "2026-12-01T10:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, until, which, err := FreezeActive(at(tt.now), tt.windows)
			require.NoError(t, err)
			require.True(t, open)
			assert.Equal(t, tt.wantWhich, which)
			assert.Equal(t, at(tt.wantUntil), until.UTC())
		})
	}
}

func TestFreezeWindowThatNeverClosesReportsALaterCheck(t *testing.T) {
	// Every 5 minutes for 7: always open. FreezeActive stops following it
	// after a bound and reports an until the caller checks again at.
	now := at("2026-12-01T09:06:00Z")
	open, until, which, err := FreezeActive(now, []v1alpha1.FreezeWindow{window("*/5 * * * *", 7*time.Minute, "")})
	require.NoError(t, err)
	assert.True(t, open)
	assert.Equal(t, 0, which)
	assert.True(t, until.After(now.Add(time.Hour)), "until %s", until)
}

func TestFreezeWindowThatNeverFiresIsNeverOpen(t *testing.T) {
	open, _, _, err := FreezeActive(at("2026-02-28T23:00:00Z"), []v1alpha1.FreezeWindow{window("0 0 30 2 *", 48*time.Hour, "")})
	require.NoError(t, err)
	assert.False(t, open)
	open, _, _, err = FreezeActive(at("2026-02-28T23:00:00Z"), nil)
	require.NoError(t, err)
	assert.False(t, open)
}

func TestFreezeWindowBadInputIsAnErrorNamingTheField(t *testing.T) {
	tests := []struct {
		name    string
		w       v1alpha1.FreezeWindow
		wantErr string
	}{
		{"unknown time zone", window("0 9 * * *", time.Hour, "Mars/Olympus"), `spec.guardrails.freezeWindows[1].timeZone: unknown time zone "Mars/Olympus"`},
		{"Local time zone", window("0 9 * * *", time.Hour, "Local"), `spec.guardrails.freezeWindows[1].timeZone: "Local" is not allowed`},
		{"six fields", window("0 0 9 * * *", time.Hour, ""), `spec.guardrails.freezeWindows[1].schedule: "0 0 9 * * *" is not a cron schedule of 5 fields`},
		{"out of range", window("0 25 * * *", time.Hour, ""), `spec.guardrails.freezeWindows[1].schedule:`},
		{"descriptor", window("@daily", time.Hour, ""), `spec.guardrails.freezeWindows[1].schedule:`},
		{"time zone in the schedule", window("CRON_TZ=Asia/Tokyo 0 9 * * *", time.Hour, ""), `spec.guardrails.freezeWindows[1].schedule: "CRON_TZ=Asia/Tokyo 0 9 * * *": a time zone belongs in timeZone`},
		{"zero duration", window("0 9 * * *", 0, ""), `spec.guardrails.freezeWindows[1].duration: 0s must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The bad window comes second, after one that is open: a window
			// that cannot be read is an error even then.
			_, _, _, err := FreezeActive(at("2026-12-01T10:00:00Z"), []v1alpha1.FreezeWindow{officeHours, tt.w})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)

			spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{FreezeWindows: []v1alpha1.FreezeWindow{officeHours, tt.w}}}
			b, err := CheckApply(at("2026-12-05T10:00:00Z"), spec, nil, nil, nil)
			require.Error(t, err)
			assert.Nil(t, b)
		})
	}
}

func TestPausedBlocksApply(t *testing.T) {
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Paused: true}}
	b, err := CheckApply(at("2026-12-01T10:00:00Z"), spec, nil, nil, []v1alpha1.ContainerResources{cr("app", "1", "", "", "")})
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonPaused, b.Reason)
	assert.Contains(t, b.Message, "spec.guardrails.paused")
	assert.Nil(t, b.Until)
}

func TestFreezeWindowBlocksApplyUntilItCloses(t *testing.T) {
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{FreezeWindows: []v1alpha1.FreezeWindow{officeHours}}}
	b, err := CheckApply(at("2026-12-01T10:00:00Z"), spec, nil, nil, nil)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonFreezeWindow, b.Reason)
	assert.Equal(t, `freeze window "0 9 * * 1-5" (UTC) is active until 2026-12-01T17:00:00Z`, b.Message)
	require.NotNil(t, b.Until)
	assert.Equal(t, at("2026-12-01T17:00:00Z"), b.Until.UTC())

	b, err = CheckApply(at("2026-12-01T17:00:00Z"), spec, nil, nil, nil)
	require.NoError(t, err)
	assert.Nil(t, b)
}

func TestCooldownBlocksDecreaseButNotIncrease(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	memUntil := now.Add(time.Hour)
	cpuUntil := now.Add(2 * time.Hour)
	memCooldown := []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(memUntil)}}
	running := []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "2", "2Gi"), cr("sidecar", "100m", "", "", "")}
	tests := []struct {
		name      string
		cooldowns []v1alpha1.Cooldown
		now       time.Time
		desired   []v1alpha1.ContainerResources
		wantMsg   string // empty: not blocked
		wantUntil time.Time
	}{
		{"memory request decrease", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "", "512Mi", "", "")},
			`a cooldown after a rollback blocks decreases of memory until 2026-12-01T11:00:00Z: container "app" requests.memory 512Mi is below the running 1Gi`, memUntil},
		{"memory limit decrease", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "", "1Gi", "", "1536Mi")},
			`container "app" limits.memory 1536Mi is below the running 2Gi`, memUntil},
		{"a byte less", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "", "1073741823", "", "")},
			`requests.memory 1073741823 is below the running 1Gi`, memUntil},
		{"a second before the cooldown ends", memCooldown, memUntil.Add(-time.Second),
			[]v1alpha1.ContainerResources{cr("app", "", "512Mi", "", "")},
			`decreases of memory`, memUntil},
		{"memory increase", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "", "2Gi", "", "4Gi")}, "", time.Time{}},
		{"same memory spelled differently", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "", "1073741824", "", "2048Mi")}, "", time.Time{}},
		{"cpu decrease under a memory cooldown", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("app", "500m", "", "1", "")}, "", time.Time{}},
		{"cooldown until is exclusive", memCooldown, memUntil,
			[]v1alpha1.ContainerResources{cr("app", "", "512Mi", "", "")}, "", time.Time{}},
		{"no running value is no decrease", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("sidecar", "", "64Mi", "", "64Mi")}, "", time.Time{}},
		{"no running container is no decrease", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("new", "", "64Mi", "", "")}, "", time.Time{}},
		{"no cooldown", nil, now,
			[]v1alpha1.ContainerResources{cr("app", "100m", "64Mi", "", "")}, "", time.Time{}},
		{"cpu decrease under a cpu cooldown", []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceCPU, Until: metav1.NewTime(cpuUntil)}}, now,
			[]v1alpha1.ContainerResources{cr("app", "1", "", "1500m", "")},
			`decreases of cpu until 2026-12-01T12:00:00Z: container "app" limits.cpu 1500m is below the running 2`, cpuUntil},
		{"both decreased: lifts when the later cooldown ends",
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceCPU, Until: metav1.NewTime(cpuUntil)}, memCooldown[0]}, now,
			[]v1alpha1.ContainerResources{cr("app", "900m", "900Mi", "", "")},
			`decreases of cpu until 2026-12-01T12:00:00Z: container "app" requests.cpu 900m is below the running 1; a cooldown after a rollback blocks decreases of memory`, cpuUntil},
		{"only the running cooldown counts",
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceCPU, Until: metav1.NewTime(now)}, memCooldown[0]}, now,
			[]v1alpha1.ContainerResources{cr("app", "900m", "900Mi", "", "")},
			`a cooldown after a rollback blocks decreases of memory until 2026-12-01T11:00:00Z: container "app" requests.memory 900Mi`, memUntil},
		{"increase in one container, decrease in another", memCooldown, now,
			[]v1alpha1.ContainerResources{cr("sidecar", "", "1Gi", "", ""), cr("app", "", "1Gi", "", "1Gi")},
			`container "app" limits.memory 1Gi is below the running 2Gi`, memUntil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &v1alpha1.RightsizingRecommendationStatus{Cooldowns: tt.cooldowns}
			b, err := CheckApply(tt.now, v1alpha1.PolicySpec{}, status, running, tt.desired)
			require.NoError(t, err)
			if tt.wantMsg == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, v1alpha1.ReasonCooldown, b.Reason)
			assert.Contains(t, b.Message, tt.wantMsg)
			require.NotNil(t, b.Until)
			assert.Equal(t, tt.wantUntil, b.Until.UTC())
		})
	}
}

func TestSameValuesAllowedForFreshBackoffTurn(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	desired := []v1alpha1.ContainerResources{cr("app", "500m", "256Mi", "", "")}
	fp := ValueFingerprint(desired)
	expiry := metav1.NewTime(now.Add(time.Minute))
	spec := func(maxAttempts int32) v1alpha1.PolicySpec {
		return v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{Backoff: v1alpha1.Backoff{MaxAttempts: maxAttempts}}}}
	}
	tests := []struct {
		name        string
		maxAttempts int32 // 0: the default, 1
		rolledBack  []string
		rollback    *v1alpha1.RollbackState
		wantReason  string // empty: not blocked
		wantUntil   *time.Time
	}{
		{"never rolled back", 2, []string{"0123456789abcdef"}, nil, "", nil},
		{"rolled back, no backoff state", 2, []string{fp}, nil, v1alpha1.ReasonSameValues, nil},
		{"backed off with turns left", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 1, Fingerprint: fp}, "", nil},
		{"backed off on the last turn", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 2, Fingerprint: fp}, v1alpha1.ReasonSameValues, nil},
		{"backed off but maxAttempts lowered since", 0, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 1, Fingerprint: fp}, v1alpha1.ReasonSameValues, nil},
		{"backoff of other values", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackedOff, Turn: 1, Fingerprint: "0123456789abcdef"}, v1alpha1.ReasonSameValues, nil},
		{"still backing off: lifts at the expiry", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: 1, Fingerprint: fp, Expiry: &expiry}, v1alpha1.ReasonSameValues, &expiry.Time},
		{"backing off on the last turn: never lifts", 1, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffBackingOff, Turn: 1, Fingerprint: fp, Expiry: &expiry}, v1alpha1.ReasonSameValues, nil},
		{"rolling back", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffRollingBack, Turn: 1, Fingerprint: fp}, v1alpha1.ReasonSameValues, nil},
		{"the turn is being watched", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffMonitoring, Turn: 2, Fingerprint: fp}, "", nil},
		{"failed permanently", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 2, Fingerprint: fp}, v1alpha1.ReasonFailedPermanent, nil},
		{"failed permanently under this policy", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 2, Fingerprint: fp,
				Policy: &v1alpha1.PolicyReference{Name: "p", Fingerprint: Fingerprint(spec(2))}}, v1alpha1.ReasonFailedPermanent, nil},
		{"failed permanently under another policy state: a fresh run", 2, []string{fp},
			&v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 2, Fingerprint: fp,
				Policy: &v1alpha1.PolicyReference{Name: "p", Fingerprint: "0123456789abcdef"}}, "", nil},
		{"failed permanently, other values", 2, nil,
			&v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 2, Fingerprint: "0123456789abcdef"}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &v1alpha1.RightsizingRecommendationStatus{RolledBackFingerprints: tt.rolledBack, Rollback: tt.rollback}
			b, err := CheckApply(now, spec(tt.maxAttempts), status, nil, desired)
			require.NoError(t, err)
			if tt.wantReason == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, tt.wantReason, b.Reason)
			assert.Contains(t, b.Message, fp)
			if tt.wantUntil == nil {
				assert.Nil(t, b.Until)
			} else {
				require.NotNil(t, b.Until)
				assert.Equal(t, *tt.wantUntil, *b.Until)
			}
		})
	}
}

func TestCheckApplyOrderOfBlocks(t *testing.T) {
	now := at("2026-12-01T10:00:00Z") // inside officeHours
	running := []v1alpha1.ContainerResources{cr("app", "1", "1Gi", "", "")}
	desired := []v1alpha1.ContainerResources{cr("app", "1", "512Mi", "", "")}
	fp := ValueFingerprint(desired)
	all := func() (v1alpha1.PolicySpec, *v1alpha1.RightsizingRecommendationStatus) {
		spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Paused: true, FreezeWindows: []v1alpha1.FreezeWindow{officeHours}}}
		status := &v1alpha1.RightsizingRecommendationStatus{
			Cooldowns:              []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(now.Add(time.Hour))}},
			Rollback:               &v1alpha1.RollbackState{State: v1alpha1.BackoffFailedPermanent, Turn: 1, Fingerprint: fp},
			RolledBackFingerprints: []string{fp},
		}
		return spec, status
	}
	tests := []struct {
		name   string
		lift   func(*v1alpha1.PolicySpec, *v1alpha1.RightsizingRecommendationStatus)
		reason string
	}{
		{"paused first", func(*v1alpha1.PolicySpec, *v1alpha1.RightsizingRecommendationStatus) {}, v1alpha1.ReasonPaused},
		{"then the freeze window", func(s *v1alpha1.PolicySpec, _ *v1alpha1.RightsizingRecommendationStatus) {
			s.Guardrails.Paused = false
		}, v1alpha1.ReasonFreezeWindow},
		{"then the cooldown", func(s *v1alpha1.PolicySpec, _ *v1alpha1.RightsizingRecommendationStatus) {
			s.Guardrails.Paused, s.Guardrails.FreezeWindows = false, nil
		}, v1alpha1.ReasonCooldown},
		{"then failedPermanent", func(s *v1alpha1.PolicySpec, st *v1alpha1.RightsizingRecommendationStatus) {
			s.Guardrails.Paused, s.Guardrails.FreezeWindows, st.Cooldowns = false, nil, nil
		}, v1alpha1.ReasonFailedPermanent},
		{"then the same values", func(s *v1alpha1.PolicySpec, st *v1alpha1.RightsizingRecommendationStatus) {
			s.Guardrails.Paused, s.Guardrails.FreezeWindows, st.Cooldowns, st.Rollback = false, nil, nil, nil
		}, v1alpha1.ReasonSameValues},
		{"then nothing", func(s *v1alpha1.PolicySpec, st *v1alpha1.RightsizingRecommendationStatus) {
			s.Guardrails.Paused, s.Guardrails.FreezeWindows, st.Cooldowns, st.Rollback, st.RolledBackFingerprints = false, nil, nil, nil, nil
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, status := all()
			tt.lift(&spec, status)
			b, err := CheckApply(now, spec, status, running, desired)
			require.NoError(t, err)
			if tt.reason == "" {
				assert.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, tt.reason, b.Reason)
		})
	}
}

func TestAddCooldownKeepsTheLaterEnd(t *testing.T) {
	t0 := at("2026-12-01T10:00:00Z")
	tests := []struct {
		name     string
		existing []v1alpha1.Cooldown
		resource v1alpha1.ResourceName
		until    time.Time
		want     []v1alpha1.Cooldown
	}{
		{"first cooldown", nil, v1alpha1.ResourceMemory, t0,
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}}},
		{"another resource is added",
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}}, v1alpha1.ResourceCPU, t0.Add(time.Hour),
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}, {Resource: v1alpha1.ResourceCPU, Until: metav1.NewTime(t0.Add(time.Hour))}}},
		{"a later end extends",
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}}, v1alpha1.ResourceMemory, t0.Add(time.Hour),
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0.Add(time.Hour))}}},
		{"an earlier end does not shorten",
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}}, v1alpha1.ResourceMemory, t0.Add(-time.Hour),
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(t0)}}},
		{"rounded up to the second status keeps", nil, v1alpha1.ResourceCPU, t0.Add(time.Millisecond),
			[]v1alpha1.Cooldown{{Resource: v1alpha1.ResourceCPU, Until: metav1.NewTime(t0.Add(time.Second))}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &v1alpha1.RightsizingRecommendationStatus{Cooldowns: tt.existing}
			AddCooldown(status, tt.resource, tt.until)
			assert.Equal(t, tt.want, status.Cooldowns)
		})
	}
}

func TestAddRolledBackFingerprintIsABoundedSet(t *testing.T) {
	status := &v1alpha1.RightsizingRecommendationStatus{}
	AddRolledBackFingerprint(status, "a")
	AddRolledBackFingerprint(status, "a")
	assert.Equal(t, []string{"a"}, status.RolledBackFingerprints)
	for i := range 100 {
		AddRolledBackFingerprint(status, fmt.Sprintf("f%03d", i))
	}
	require.Len(t, status.RolledBackFingerprints, 100)
	assert.Equal(t, "f000", status.RolledBackFingerprints[0], "the oldest made room")
	assert.Equal(t, "f099", status.RolledBackFingerprints[99])
}

// BenchmarkFreezeActiveDenseSchedule is the costliest window to evaluate:
// one that fires every minute and lasts a week, in a time zone.
func BenchmarkFreezeActiveDenseSchedule(b *testing.B) {
	windows := []v1alpha1.FreezeWindow{window("* * * * *", 7*24*time.Hour, "Europe/Paris"), officeHours}
	now := at("2026-12-01T10:00:30Z")
	for b.Loop() {
		if _, _, _, err := FreezeActive(now, windows); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFreezeActiveOfficeHours is a typical policy's window, closed.
func BenchmarkFreezeActiveOfficeHours(b *testing.B) {
	windows := []v1alpha1.FreezeWindow{officeHours}
	now := at("2026-12-05T10:00:00Z")
	for b.Loop() {
		if _, _, _, err := FreezeActive(now, windows); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRetryTurnIsGovernedByTheBackoffNotTheCooldown: once a backoff turn
// completed with turns left, the retry of the same values is not held
// back by the cooldown of the rollback that ended the turn; other values
// that decrease the resource still are.
func TestRetryTurnIsGovernedByTheBackoffNotTheCooldown(t *testing.T) {
	now := at("2026-12-01T10:00:00Z")
	spec := v1alpha1.PolicySpec{Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{Backoff: v1alpha1.Backoff{MaxAttempts: 2}}}}
	running := []v1alpha1.ContainerResources{cr("app", "500m", "256Mi", "", "")}
	retried := []v1alpha1.ContainerResources{cr("app", "500m", "128Mi", "", "")}
	other := []v1alpha1.ContainerResources{cr("app", "500m", "192Mi", "", "")}
	fp := ValueFingerprint(retried)
	status := func(state v1alpha1.BackoffState, turn int32) *v1alpha1.RightsizingRecommendationStatus {
		return &v1alpha1.RightsizingRecommendationStatus{
			Cooldowns:              []v1alpha1.Cooldown{{Resource: v1alpha1.ResourceMemory, Until: metav1.NewTime(now.Add(time.Hour))}},
			RolledBackFingerprints: []string{fp},
			Rollback:               &v1alpha1.RollbackState{State: state, Turn: turn, Fingerprint: fp},
		}
	}

	b, err := CheckApply(now, spec, status(v1alpha1.BackoffBackedOff, 1), running, retried)
	require.NoError(t, err)
	assert.Nil(t, b, "the retry happens at the backoff's expiry")

	b, err = CheckApply(now, spec, status(v1alpha1.BackoffBackedOff, 1), running, other)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonCooldown, b.Reason, "the cooldown applies to other values")

	b, err = CheckApply(now, spec, status(v1alpha1.BackoffBackedOff, 2), running, retried)
	require.NoError(t, err)
	require.NotNil(t, b)
	assert.Equal(t, v1alpha1.ReasonCooldown, b.Reason, "no turn left: no retry, the cooldown holds")
}

// TestUnjudgedUntilTheWatchEnds checks which states of a change no new
// change may cut short: applying, applied, watched, breached and not yet
// restored; not healthy, restored, blocked or without a change.
func TestUnjudgedUntilTheWatchEnds(t *testing.T) {
	t0 := at("2026-12-05T09:54:10Z")
	change := &v1alpha1.Change{AppliedAt: metav1.NewTime(t0)}
	applying := []metav1.Condition{{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse, Reason: v1alpha1.AppliedReasonApplying}}
	blocked := []metav1.Condition{{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse, Reason: v1alpha1.AppliedReasonBlocked}}
	for _, tc := range []struct {
		name string
		st   v1alpha1.RightsizingRecommendationStatus
		want bool
	}{
		{"applying", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseHealthy, Change: change, Conditions: applying}, true},
		{"applied", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied, Change: change}, true},
		{"watched", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseWatching, Change: change}, true},
		{"breached, not restored", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseRolledBack, Change: change,
			Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills}}, true},
		{"restored", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseRolledBack, Change: change,
			Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, Restored: true}}, false},
		{"healthy", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseHealthy, Change: change}, false},
		{"blocked after a healthy watch", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseBlocked, Change: change, Conditions: blocked}, false},
		{"no change", v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseWatching}, false},
	} {
		got, ok := Unjudged(&tc.st)
		assert.Equal(t, tc.want, ok, tc.name)
		if tc.want {
			assert.Equal(t, t0, got, tc.name)
		}
	}
}
