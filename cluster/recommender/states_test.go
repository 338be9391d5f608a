package recommender

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kerf-dev/kerf/cluster/recommend"
)

// TestContainerStatesHoldLessThanAMap: a workload's histories in a slice
// hold less than half the heap of a map of pointers to them, as the
// recommender kept them before, for the one container most workloads
// have. get finds each by name, add keeps what it is given.
func TestContainerStatesHoldLessThanAMap(t *testing.T) {
	const n = 20000
	held := func(build func(i int) any) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := make([]any, n)
		for i := range kept {
			kept[i] = build(i)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(kept)
		return after.HeapAlloc - before.HeapAlloc
	}
	asMap := held(func(int) any {
		return map[string]*recommend.ContainerState{"app": {}}
	})
	asSlice := held(func(int) any {
		var cs containerStates
		cs.add("app", recommend.ContainerState{})
		return &cs
	})
	t.Logf("one container's history: %.0f bytes in a map, %.0f in containerStates", float64(asMap)/n, float64(asSlice)/n)
	assert.Less(t, float64(asSlice), 0.5*float64(asMap))

	var cs containerStates
	m, err := recommend.NewModel(recommend.DefaultParams())
	require.NoError(t, err)
	var st recommend.ContainerState
	now := time.Now()
	st.AddThrottling(m, 0.5, now)
	cs.add("app", st)
	cs.add("sidecar", recommend.ContainerState{})
	assert.Nil(t, cs.get("other"))
	assert.NotNil(t, cs.get("app"))
	assert.Equal(t, st.Signals(m, now), cs.get("app").Signals(m, now), "kept as given")
	assert.NotZero(t, cs.get("app").Signals(m, now).ThrottlingRatio)
	assert.Equal(t, []string{"app", "sidecar"}, cs.names())
}

// TestStampsKeepTheirTimes: a stamp gives back the instant it was made of,
// to the nanosecond, the zero time included, and orders as the times do. A
// trackedInstance with stamps is smaller than with time.Time's three
// words each.
func TestStampsKeepTheirTimes(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 456789012, time.UTC)
	for _, tm := range []time.Time{{}, at, at.Local(), time.Now(), time.Unix(1, 0)} {
		s := stampOf(tm)
		assert.True(t, s.Time().Equal(tm), "%v kept as %v", tm, s.Time())
		assert.Equal(t, tm.IsZero(), s.IsZero())
	}
	assert.Less(t, stampOf(at), stampOf(at.Add(time.Nanosecond)))
	assert.Less(t, stampOf(time.Time{}), stampOf(time.Unix(1, 0)), "the zero time is the earliest")
	withTimes := unsafe.Sizeof(trackedInstance{}) + 4*(unsafe.Sizeof(time.Time{})-unsafe.Sizeof(stamp(0)))
	t.Logf("a trackedInstance: %d bytes with stamps, %d with times", unsafe.Sizeof(trackedInstance{}), withTimes)
	assert.LessOrEqual(t, unsafe.Sizeof(trackedInstance{}), uintptr(80))
}

// TestATrackedWorkloadKeepsItsOwnerAsAUID: a tracked workload keeps its
// checkpoint's owner as the workload's UID, the rest of the reference
// being its Ref, and its flags side by side: 144 bytes, Go's 144 size
// class, where a whole metav1.OwnerReference and padding made 216 (the
// 224 class), about 2 MB more at 25,000 workloads.
func TestATrackedWorkloadKeepsItsOwnerAsAUID(t *testing.T) {
	t.Logf("a trackedWorkload: %d bytes", unsafe.Sizeof(trackedWorkload{}))
	assert.LessOrEqual(t, unsafe.Sizeof(trackedWorkload{}), uintptr(144))
}
