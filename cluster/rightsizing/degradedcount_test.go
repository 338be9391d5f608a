package rightsizing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// TestRolledBackOfLastCountsTheLastChangesSinceTheResume: a change is an
// applied action, rolled back when a rolled_back action follows it; only
// the last n changes at or after the resume count.
func TestRolledBackOfLastCountsTheLastChangesSinceTheResume(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h := func(types ...v1alpha1.ActionType) []v1alpha1.Action {
		out := make([]v1alpha1.Action, len(types))
		for i, typ := range types {
			out[i] = v1alpha1.Action{Time: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)), Type: typ}
		}
		return out
	}
	// promoted gives the applied actions at idx the reason of a canary's
	// promotion.
	promoted := func(h []v1alpha1.Action, idx ...int) []v1alpha1.Action {
		for _, i := range idx {
			h[i].Reason = v1alpha1.ReasonCanaryPromoted
		}
		return h
	}
	const (
		ap = v1alpha1.ActionApplied
		rb = v1alpha1.ActionRolledBack
		ok = v1alpha1.ActionHealthy
		bl = v1alpha1.ActionBlocked
	)
	for _, tc := range []struct {
		name                string
		history             []v1alpha1.Action
		since               time.Time
		n                   int
		rolledBack, changes int
	}{
		{"none", nil, time.Time{}, 5, 0, 0},
		{"three of five", h(ap, rb, ap, ok, ap, rb, bl, ap, ok, ap, rb), time.Time{}, 5, 3, 5},
		{"the oldest falls out of the last five", h(ap, rb, ap, ok, ap, rb, ap, ok, ap, ok, ap, rb), time.Time{}, 5, 2, 5},
		{"fewer changes than n", h(ap, rb, ap, rb), time.Time{}, 5, 2, 2},
		{"a rollback without its change in the window", h(ap, rb, ap, rb, ap), t0.Add(3 * time.Minute), 5, 0, 1},
		{"only since the resume", h(ap, rb, ap, rb, ap, rb), t0.Add(4 * time.Minute), 5, 1, 1},
		{"a canary's promotion is the same change", promoted(h(ap, ap, rb, ap, ap, ok), 1, 4), time.Time{}, 5, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rolledBack, changes := rolledBackOfLast(tc.history, tc.since, tc.n)
			assert.Equal(t, tc.rolledBack, rolledBack, "rolled back")
			assert.Equal(t, tc.changes, changes, "changes")
		})
	}
}
