package stream

import (
	"testing"
	"time"

	"github.com/kerf-dev/kerf/node/report"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIndexSendsIncrementsAndANewIndexOnARestart(t *testing.T) {
	clk, err := newKernelClock()
	require.NoError(t, err)
	key := report.ContainerKey{PodUID: "uid", Name: "app"}
	at := time.Now()
	var x index
	x.reset()

	msg := x.encode(clk, []report.Sample{{Key: key, At: at, Periods: 100, Throttled: 10, ThrottledTime: time.Second}}, nil, true)
	assert.True(t, msg.GetSnapshot())
	require.Len(t, msg.GetContainers(), 1)
	first := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(0), "uid", "app", uint64(100), uint64(10), uint64(time.Second)},
		[]any{first.GetIndex(), first.GetPodUid(), first.GetContainer(), first.GetPeriods(), first.GetThrottled(), first.GetThrottledNs()},
		"a container new on the stream: its identity and absolute values")
	assert.Equal(t, clk.ns(at), msg.GetKernelNs())

	msg = x.encode(clk, []report.Sample{{Key: key, At: at.Add(time.Second), Periods: 150, Throttled: 12, ThrottledTime: 2 * time.Second}}, nil, false)
	next := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(0), "", uint64(50), uint64(2), uint64(time.Second)},
		[]any{next.GetIndex(), next.GetPodUid(), next.GetPeriods(), next.GetThrottled(), next.GetThrottledNs()},
		"a known container: its index and increments")

	msg = x.encode(clk, []report.Sample{{Key: key, At: at, Periods: 5, Throttled: 1}}, nil, false)
	assert.Equal(t, []uint32{0}, msg.GetGone(), "counters going back: the old index is gone")
	restarted := msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(1), "uid", uint64(5)}, []any{restarted.GetIndex(), restarted.GetPodUid(), restarted.GetPeriods()})
	assert.Equal(t, clk.ns(at.Add(time.Second)), msg.GetKernelNs(), "time never goes back on one container")

	idx, ok := x.forget(key)
	assert.True(t, ok)
	assert.Equal(t, uint32(1), idx)
	_, ok = x.forget(key)
	assert.False(t, ok)
}
