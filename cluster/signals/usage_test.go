package signals

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestUsageKeepsTheNewestReadingsPerContainer(t *testing.T) {
	u := NewUsage(time.Hour)
	t0 := time.Unix(1_796_000_000, 0) // readings come back in time.Local
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * 10 * time.Second) }
	reading := func(pod types.UID, c string, s int) UsageSample {
		return UsageSample{PodUID: pod, Container: c, At: at(s), CPU: time.Duration(s) * time.Second,
			WorkingSet: uint64(s) << 20, Peak: uint64(s+1) << 20}
	}
	for s := range UsageSamples + 2 {
		u.Add(reading("p", "app", s))
	}
	u.Add(reading("p", "side", 1), reading("q", "app", 2))
	got := u.Since("p", "app", time.Time{}, nil)
	assert.Equal(t, []UsageSample{reading("p", "app", 2), reading("p", "app", 3), reading("p", "app", 4), reading("p", "app", 5)}, got,
		"the ring keeps the newest 4, oldest first")
	assert.Equal(t, []UsageSample{reading("p", "app", 5)}, u.Since("p", "app", at(4), nil))
	latest, ok := u.Latest("p", "app")
	require.True(t, ok)
	assert.Equal(t, reading("p", "app", 5), latest)

	// A reading resent after a reconnect (not newer) is dropped.
	u.Add(reading("p", "app", 4))
	assert.Len(t, u.Since("p", "app", at(4), nil), 1)

	containers, readings := u.Len()
	assert.Equal(t, []int{3, UsageSamples + 2}, []int{containers, readings})

	u.Gone("p", "app")
	_, ok = u.Latest("p", "app")
	assert.False(t, ok)
	assert.Empty(t, u.Since("p", "app", time.Time{}, nil))
	containers, _ = u.Len()
	assert.Equal(t, 2, containers, "p/side and q/app are left")
}

func TestUsageForgetsContainersNoReadingCameForInTheRetention(t *testing.T) {
	u := NewUsage(10 * time.Minute)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	u.Add(UsageSample{PodUID: "old", Container: "app", At: t0})
	for m := range 12 {
		u.Add(UsageSample{PodUID: "live", Container: "app", At: t0.Add(time.Duration(m+1) * time.Minute)})
	}
	_, ok := u.Latest("old", "app")
	assert.False(t, ok, "no reading for over 10 minutes")
	_, ok = u.Latest("live", "app")
	assert.True(t, ok)
	_, readings := u.Len()
	assert.Equal(t, UsageSamples, readings, "bounded per container")
}
