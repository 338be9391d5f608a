package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/forward"
)

// TestHistoryIsNumberedAndTheNumbersOutliveTheTrim: each action gets the
// next Seq, the oldest are trimmed at historyLimit without renumbering, and
// a history recorded before Seq existed is numbered by position, as the
// hub forwarder numbered it (forward.SeqOf), so its idempotency keys stay
// the same across the upgrade.
func TestHistoryIsNumberedAndTheNumbersOutliveTheTrim(t *testing.T) {
	var rsr v1alpha1.RightsizingRecommendation
	for range historyLimit + 5 {
		addHistory(&rsr, v1alpha1.Action{Type: v1alpha1.ActionBlocked})
	}
	h := rsr.Status.History
	assert.Len(t, h, historyLimit)
	assert.Equal(t, int64(6), h[0].Seq, "seq 1 to 5 trimmed")
	assert.Equal(t, int64(historyLimit+5), h[len(h)-1].Seq)

	var legacy v1alpha1.RightsizingRecommendation
	legacy.Status.History = []v1alpha1.Action{{Type: v1alpha1.ActionApplied}, {Type: v1alpha1.ActionHealthy}}
	before := []int64{forward.SeqOf(legacy.Status.History, 0), forward.SeqOf(legacy.Status.History, 1)}
	addHistory(&legacy, v1alpha1.Action{Type: v1alpha1.ActionApplied})
	got := legacy.Status.History
	assert.Equal(t, before, []int64{got[0].Seq, got[1].Seq}, "numbered as the forwarder numbered them")
	assert.Equal(t, int64(3), got[2].Seq)
}
