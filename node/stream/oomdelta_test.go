package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/node/report"
)

// TestIndexCarriesTheAbsoluteOOMKillCount: the kernel's OOM kill count
// goes as its value, marked read, on the index's first sample that has
// it, then as increments that sum back to the absolute count; while it
// holds still it costs nothing on the wire, and a fresh index (a new
// stream: a restarted agent) sends the absolute count again, kills made
// while the agent was down included.
func TestIndexCarriesTheAbsoluteOOMKillCount(t *testing.T) {
	clk, err := newKernelClock()
	require.NoError(t, err)
	key := report.ContainerKey{PodUID: "uid", Name: "app"}
	at := time.Now()
	var x index
	x.reset()
	smp := func(i int, kills uint64, has bool) report.Sample {
		return report.Sample{Key: key, At: at.Add(time.Duration(i) * time.Second), Periods: 100, OOMKills: kills, HasOOMKills: has}
	}

	cc := x.encode(clk, []report.Sample{smp(0, 0, false)}, nil, true).GetContainers()[0]
	assert.False(t, cc.GetOomKillsRead(), "not read yet: the leader does not know the count")

	cc = x.encode(clk, []report.Sample{smp(1, 0, true)}, nil, false).GetContainers()[0]
	assert.True(t, cc.GetOomKillsRead(), "first read: a count of zero is known")
	assert.Zero(t, cc.GetOomKills())

	unchanged := x.encode(clk, []report.Sample{smp(2, 0, true)}, nil, false)
	cc = unchanged.GetContainers()[0]
	assert.False(t, cc.GetOomKillsRead())
	assert.Zero(t, cc.GetOomKills())
	b, err := proto.Marshal(cc)
	require.NoError(t, err)
	bare, err := proto.Marshal(&streamv1.ContainerCounters{Index: cc.GetIndex(), KernelNsDelta: cc.GetKernelNsDelta()})
	require.NoError(t, err)
	assert.Equal(t, len(bare), len(b), "an unchanged count costs no byte")

	sum := uint64(0)
	for i, kills := range []uint64{2, 2, 3} {
		cc = x.encode(clk, []report.Sample{smp(3+i, kills, true)}, nil, false).GetContainers()[0]
		sum += cc.GetOomKills()
		assert.Equal(t, kills, sum, "the increments sum to the absolute count")
	}
	assert.Equal(t, uint32(0), cc.GetIndex(), "one index all along")

	msg := x.encode(clk, []report.Sample{smp(7, 1, true)}, nil, false)
	assert.Equal(t, []uint32{0}, msg.GetGone(), "a count going back is a new cgroup: the old index is gone")
	cc = msg.GetContainers()[0]
	assert.Equal(t, []any{uint32(1), "uid", uint64(1), true}, []any{cc.GetIndex(), cc.GetPodUid(), cc.GetOomKills(), cc.GetOomKillsRead()})

	var y index // a restarted agent's new stream
	y.reset()
	cc = y.encode(clk, []report.Sample{smp(8, 3, true)}, nil, true).GetContainers()[0]
	assert.Equal(t, []any{uint64(3), true}, []any{cc.GetOomKills(), cc.GetOomKillsRead()}, "the absolute count on a new stream")
}
