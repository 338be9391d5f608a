package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Guardrails say when changes may be applied and when they roll back.
// Pause and freeze windows block applies, never rollbacks.
type Guardrails struct {
	// Paused blocks every apply (phase Blocked, reason Paused).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// FreezeWindows block applies while one is open (phase Blocked, reason
	// FreezeWindow).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	FreezeWindows []FreezeWindow `json:"freezeWindows,omitempty"`
	// AllowQoSChange lets a Rollout change move the pods to another QoS
	// class (Guaranteed, Burstable, BestEffort). Without it such a change
	// is blocked (reason QoSClass). An InPlace change never may: the
	// apiserver refuses a resize that changes the class.
	// +optional
	AllowQoSChange bool `json:"allowQoSChange,omitempty"`
	// Rollback sets the health watch's thresholds and what follows a
	// rollback.
	// +kubebuilder:default={}
	// +optional
	Rollback RollbackGuardrails `json:"rollback,omitempty"`
	// Canary, when set, applies an InPlace change to some pods first and
	// watches them for its duration before the rest are resized
	// (docs/health.md, "Canary"). Rollout and Deferred changes apply whole.
	// +optional
	Canary *CanaryGuardrails `json:"canary,omitempty"`
	// Degraded marks a workload Degraded when rolledBack of its last
	// `of` changes were rolled back: Kerf then leaves it alone until a
	// person resumes it or the policy changes (docs/health.md). Absent
	// means the defaults, 3 of 5.
	// +optional
	Degraded *DegradedGuardrails `json:"degraded,omitempty"`
}

// CanaryGuardrails say which share of a workload's pods an InPlace change
// goes to first, and for how long they are watched alone.
// +kubebuilder:validation:XValidation:rule=`has(self.pods) != has(self.percent)`,message="spec.guardrails.canary: set exactly one of pods and percent"
type CanaryGuardrails struct {
	// Pods is how many pods are the canary.
	// +kubebuilder:validation:XValidation:rule=`self >= 1`,message="spec.guardrails.canary.pods must be at least 1"
	// +optional
	Pods *int32 `json:"pods,omitempty"`
	// Percent is the share of the running pods that are the canary, rounded
	// up to a whole pod.
	// +kubebuilder:validation:XValidation:rule=`self >= 1 && self <= 100`,message="spec.guardrails.canary.percent must be between 1 and 100"
	// +optional
	Percent *int32 `json:"percent,omitempty"`
	// Duration is how long the canary pods are watched before the rest
	// are resized.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="spec.guardrails.canary.duration must be a positive duration such as 10m (units ns, us, ms, s, m, h)"
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// DegradedOrDefault is spec.guardrails.degraded with its defaults filled
// in, the defaults themselves when it is absent.
func (g *Guardrails) DegradedOrDefault() DegradedGuardrails {
	var d DegradedGuardrails
	if g.Degraded != nil {
		d = *g.Degraded.DeepCopy()
	}
	d.SetDefaults()
	return d
}

// DegradedGuardrails say when a workload whose changes keep being rolled
// back is marked Degraded (phase Degraded, docs/health.md "A workload
// that keeps failing").
// +kubebuilder:validation:XValidation:rule=`!has(self.rolledBack) || !has(self.of) || self.rolledBack <= self.of`,message="must not be above of",fieldPath=".rolledBack"
type DegradedGuardrails struct {
	// Disabled turns the mark off: no workload of the policy is marked
	// Degraded, and one marked already is resumed.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// RolledBack is how many of the last `of` changes must have been
	// rolled back for the mark, from 1 to `of`.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	// +optional
	RolledBack *int32 `json:"rolledBack,omitempty"`
	// Of is how many of the workload's last changes are counted, from 1
	// to 20. Twenty changes fit in status.history's 100 entries: a change
	// leaves its applied and rolled_back or healthy entries, and the
	// blocks and refusals between two changes rarely number more than
	// three.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	// +optional
	Of *int32 `json:"of,omitempty"`
}

// FreezeWindow is a recurring time during which no change is applied.
type FreezeWindow struct {
	// Schedule is when the window opens, a cron expression of 5 fields
	// (minute hour day-of-month month day-of-week), such as "0 9 * * 1-5".
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[ ]*[-0-9A-Za-z*?,/#]+([ ]+[-0-9A-Za-z*?,/#]+){4}[ ]*$')`,message="must be a cron schedule of 5 space-separated fields (minute hour day-of-month month day-of-week), such as '0 9 * * 1-5'"
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open, such as 2h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 2h or 90m (units ns, us, ms, s, m, h)"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is the IANA time zone of the schedule, such as Europe/Paris.
	// The apiserver refuses a zone its time zone database does not know
	// (kube-apiserver embeds Go's); the leader checks again with its own.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[A-Za-z][-A-Za-z0-9_+]*(/[-A-Za-z0-9_+]+)*$') && self != 'Local'`,message="must be an IANA time zone name such as UTC or Europe/Paris"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[A-Za-z][-A-Za-z0-9_+]*(/[-A-Za-z0-9_+]+)*$') || self == 'Local' || timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0`,message="must be a time zone of the IANA database such as UTC or Europe/Paris"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// RestoreTarget says which values a rollback restores.
// +kubebuilder:validation:Enum=Previous;LastHealthy;Manifest
type RestoreTarget string

// The restore targets.
const (
	// RestorePrevious restores the values the change replaced.
	RestorePrevious RestoreTarget = "Previous"
	// RestoreLastHealthy restores the last values that passed a health
	// watch (status.lastHealthy), or the previous ones when there are none.
	RestoreLastHealthy RestoreTarget = "LastHealthy"
	// RestoreManifest restores the values the workload's own manifest
	// declares, without Kerf's changes.
	RestoreManifest RestoreTarget = "Manifest"
)

// RollbackGuardrails are the health watch's thresholds and what follows a
// rollback (docs/design.md sections 3 and 4). Every field is optional; the
// defaults are in defaults.go and in the schema.
type RollbackGuardrails struct {
	// WatchDuration is how long the health watch lasts after a change.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30m or 1h30m (units ns, us, ms, s, m, h)"
	// +optional
	WatchDuration *metav1.Duration `json:"watchDuration,omitempty"`
	// OOMKills is the count of OOM kills since the change that rolls memory
	// back; 0 turns the signal off.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	OOMKills *int32 `json:"oomKills,omitempty"`
	// Restarts is the count of container restarts since the change that
	// rolls every touched resource back; 0 turns the signal off.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +optional
	Restarts *int32 `json:"restarts,omitempty"`
	// ThrottlingRatio is the CFS throttling ratio (throttled periods over
	// periods) that rolls CPU back: a decimal string in (0, 1].
	// +kubebuilder:default="0.25"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0([.][0-9]+)?|1([.]0+)?)$') && double(self) > 0.0`,message="must be a decimal string in (0, 1], such as '0.25'"
	// +optional
	ThrottlingRatio string `json:"throttlingRatio,omitempty"`
	// Cooldown is how long decreases of a rolled-back resource stay blocked
	// after the rollback; 0 turns cooldowns off.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s')`,message="must be a duration such as 24h or 0 (units ns, us, ms, s, m, h)"
	// +optional
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`
	// RestoreTo says which values a rollback restores: Previous,
	// LastHealthy or Manifest.
	// +kubebuilder:default=Previous
	// +optional
	RestoreTo RestoreTarget `json:"restoreTo,omitempty"`
	// AdoptionThresholdPercent is the share of the workload's pods that must
	// run the applied values for the watch to end Healthy; below it the
	// change is rolled back (reason NotAdopted). 0 requires no share, but
	// a watch that ends with no pod running the values is never Healthy.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	AdoptionThresholdPercent int32 `json:"adoptionThresholdPercent,omitempty"`
	// UnschedulableGrace is how long a pod of the change may stay Pending
	// and Unschedulable, or its in-place resize Infeasible, before the
	// change is rolled back (reasons Unschedulable and Infeasible) without
	// waiting for the watch's end.
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 1m or 90s (units ns, us, ms, s, m, h)"
	// +optional
	UnschedulableGrace *metav1.Duration `json:"unschedulableGrace,omitempty"`
	// Backoff says when the same values may be tried again after a
	// rollback.
	// +kubebuilder:default={}
	// +optional
	Backoff Backoff `json:"backoff,omitempty"`
}

// Backoff says when the same values may be tried again after a rollback:
// turn n backs off for timePeriod × multiplyByTurn × n, and after
// maxAttempts turns the values are failedPermanent.
type Backoff struct {
	// TimePeriod is the base backoff.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 10m (units ns, us, ms, s, m, h)"
	// +optional
	TimePeriod *metav1.Duration `json:"timePeriod,omitempty"`
	// MultiplyByTurn multiplies the backoff by the turn number.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MultiplyByTurn int32 `json:"multiplyByTurn,omitempty"`
	// MaxAttempts is how many times the same values are tried; 1 means they
	// are never applied again after a rollback.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
}
