package rightsizing

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestARecheckComesWithinItsBound: a running watch is looked at again
// within watchRecheck, and no sooner than its last fifth.
func TestARecheckComesWithinItsBound(t *testing.T) {
	assert.Equal(t, watchRecheck, recheckAfter(0))
	assert.Equal(t, 27*time.Second, recheckAfter(0.5))
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		d := recheckAfter(r.Float64())
		assert.LessOrEqual(t, d, watchRecheck)
		assert.Greater(t, d, watchRecheck-watchRecheck/5)
	}
}

// TestWatchesRecheckedTogetherDriftApart: 1,000 watches looked at in the
// same second, as after a backlog of the reconciler, are spread over
// seconds after a few rechecks. With a fixed 30 s (the recheck before)
// they stayed together, every 30 s a burst of all of them.
func TestWatchesRecheckedTogetherDriftApart(t *testing.T) {
	const watches, rechecks = 1000, 10
	busiest := func(after func() time.Duration) int {
		perSecond := map[time.Duration]int{}
		for range watches {
			var at time.Duration
			for range rechecks {
				at += after()
			}
			perSecond[at.Truncate(time.Second)]++
		}
		most := 0
		for _, n := range perSecond {
			most = max(most, n)
		}
		return most
	}
	assert.Equal(t, watches, busiest(func() time.Duration { return recheckAfter(0) }), "a fixed recheck keeps them together")
	r := rand.New(rand.NewPCG(3, 4))
	spread := busiest(func() time.Duration { return recheckAfter(r.Float64()) })
	t.Logf("the busiest second after %d rechecks: %d of %d watches", rechecks, spread, watches)
	assert.Less(t, spread, watches/10, "the spread drawn anew each time lets them drift apart")
}
