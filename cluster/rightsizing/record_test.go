package rightsizing

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/forward"
)

// TestHistoryIsNumberedAndTheNumbersOutliveTheTrim: each action gets the
// next Seq, the oldest are trimmed at v1alpha1.MaxHistory without renumbering, and
// a history recorded before Seq existed is numbered by position, as the
// hub forwarder numbered it (forward.SeqOf), so its idempotency keys stay
// the same across the upgrade.
func TestHistoryIsNumberedAndTheNumbersOutliveTheTrim(t *testing.T) {
	var rsr v1alpha1.RightsizingRecommendation
	for range v1alpha1.MaxHistory + 5 {
		addHistory(&rsr, v1alpha1.Action{Type: v1alpha1.ActionBlocked})
	}
	h := rsr.Status.History
	assert.Len(t, h, v1alpha1.MaxHistory)
	assert.Equal(t, int64(6), h[0].Seq, "seq 1 to 5 trimmed")
	assert.Equal(t, int64(v1alpha1.MaxHistory+5), h[len(h)-1].Seq)

	var legacy v1alpha1.RightsizingRecommendation
	legacy.Status.History = []v1alpha1.Action{{Type: v1alpha1.ActionApplied}, {Type: v1alpha1.ActionHealthy}}
	before := []int64{forward.SeqOf(legacy.Status.History, 0), forward.SeqOf(legacy.Status.History, 1)}
	addHistory(&legacy, v1alpha1.Action{Type: v1alpha1.ActionApplied})
	got := legacy.Status.History
	assert.Equal(t, before, []int64{got[0].Seq, got[1].Seq}, "numbered as the forwarder numbered them")
	assert.Equal(t, int64(3), got[2].Seq)
}

// TestRefusalsThatComeAndGoAreRecordedOnce: a set of refusals is news only
// when one of its refusals is in no refused action since the last change.
// Before, a set that ended for a pass and came back (a throttling ratio
// around its threshold) was recorded again each time.
func TestRefusalsThatComeAndGoAreRecordedOnce(t *testing.T) {
	oom := v1alpha1.Refusal{Container: "app", Resource: v1alpha1.ResourceMemory, Field: "request", Reason: "OOMKill", Held: 1 << 30}
	throttled := v1alpha1.Refusal{Container: "app", Resource: v1alpha1.ResourceCPU, Field: "request", Reason: "Throttled", Held: 64}
	refused := func(fs ...v1alpha1.Refusal) v1alpha1.Action {
		return v1alpha1.Action{Type: v1alpha1.ActionRefused, Refusals: fs}
	}
	history := []v1alpha1.Action{{Type: v1alpha1.ActionApplied}, refused(oom), {Type: v1alpha1.ActionHealthy}, refused(throttled)}

	assert.True(t, refusalsRecorded(history, []v1alpha1.Refusal{oom}), "the OOM refusal coming back")
	assert.True(t, refusalsRecorded(history, []v1alpha1.Refusal{oom, throttled}), "both, each recorded since the change")
	higher := oom
	higher.Held = 2 << 30
	assert.False(t, refusalsRecorded(history, []v1alpha1.Refusal{higher}), "a held value that moved is news")
	other := throttled
	other.Reason = "UpscaleOnly"
	assert.False(t, refusalsRecorded(history, []v1alpha1.Refusal{other}), "another reason is news")

	history = append(history, v1alpha1.Action{Type: v1alpha1.ActionRolledBack})
	assert.False(t, refusalsRecorded(history, []v1alpha1.Refusal{oom}), "after a change every refusal is news again")
}
